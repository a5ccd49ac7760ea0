"""A run's inbox as the interpreter reads it: who takes a message now, and when it is busy.

A graph that declares ``busy:`` takes messages (``phasegraph send``, ``POST
/runs/ID/messages``, :meth:`~phasegraph.Engine.send`). Each is committed to the run's
inbox in the store first, then delivered, in order, at a step boundary where the machine
accepts it: a message fires the graph's message trigger (``busy.trigger``, default
``message``) with the message as the reply's payload,

* on an open gate that accepts that trigger (the run is *idle* there), under every
  policy;
* or, under ``interrupt`` and ``rollback``, on a running node whose state accepts it
  (the action in flight was cut short first, see
  :class:`~phasegraph.worker.RunDriver`).

Anywhere else the run is *busy*: under ``reject`` a message is refused, naming the node
and state the run is on; under ``enqueue`` it waits in the inbox for the next gate that
takes it. A gate's own ``busy:`` overrides the graph's while its node is the busy one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from phasegraph.codec import _envelope
from phasegraph.errors import InputError, RunBusyError, RunStateError
from phasegraph.model import BusyPolicy, NodeStatus, RunState, StepRecord
from phasegraph.run._gates import gate_answers
from phasegraph.run._prepare import PreparedGraph

__all__ = [
    "MAX_MESSAGE_ID",
    "MESSAGE_EVENT",
    "Sent",
    "Target",
    "busy_refusal",
    "check_message_id",
    "decode_message",
    "encode_message",
    "message_policy",
    "message_target",
    "no_messages",
    "refusal_for",
    "taken_by",
]

MESSAGE_EVENT: Final = "message"
"""The kind of event a step that took a message records: its ``id`` and ``position``."""

MAX_MESSAGE_ID: Final = 200
"""The longest message id a sender may give."""

_CUTTING: Final = frozenset({BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK})


@dataclass(frozen=True, slots=True)
class Target:
    """Where the next message goes now.

    Attributes:
        node: The node that takes it.
        gate: The open gate (interrupt id) that takes it; ``None``: the node's busy
            state takes it (``interrupt``, ``rollback``).
        policy: The policy in force for the node.
    """

    node: str
    gate: str | None
    policy: BusyPolicy


def message_policy(prepared: PreparedGraph, node_id: str | None) -> BusyPolicy:
    """The policy for a message while ``node_id`` is busy: its gate's, else the graph's."""
    busy = prepared.definition.busy
    if busy is None:
        return BusyPolicy.REJECT
    if node_id is not None:
        for (node, _), gate in prepared.gates.items():
            if node == node_id and gate.busy is not None:
                return gate.busy
    return busy.policy


def _busy_nodes(prepared: PreparedGraph, state: RunState) -> list[str]:
    """Running nodes (not waiting at a gate), in graph order."""
    gated = {interrupt.node for interrupt in state.interrupts.values()}
    running = [
        node_id
        for node_id, node in state.nodes.items()
        if node.status is NodeStatus.RUNNING and node_id not in gated
    ]
    position = prepared.workflow.position
    return sorted(running, key=lambda node_id: position.get(node_id, len(position)))


def message_target(prepared: PreparedGraph, state: RunState) -> Target | None:
    """Where a message would be delivered now, or ``None`` if nothing takes one now."""
    busy = prepared.definition.busy
    if busy is None or state.status.terminal:
        return None
    trigger = busy.trigger
    for interrupt_id, answers in gate_answers(prepared, state).items():
        if trigger in answers:
            node = state.interrupts[interrupt_id].node
            return Target(node, interrupt_id, message_policy(prepared, node))
    for node_id in _busy_nodes(prepared, state):
        policy = message_policy(prepared, node_id)
        if policy not in _CUTTING:
            continue
        machine = prepared.workflow.nodes[node_id].machine
        if trigger in prepared.machines.legal_triggers(machine, state.nodes[node_id].path):
            return Target(node_id, None, policy)
    return None


def busy_refusal(prepared: PreparedGraph, state: RunState, *, waiting: int) -> RunBusyError:
    """The refusal of a message that finds the run busy (``waiting``: messages not taken)."""
    run_id = state.run_id
    busy = _busy_nodes(prepared, state)
    if busy:
        node_id = busy[0]
        where = ".".join(state.nodes[node_id].path)
        return RunBusyError(
            f"run {run_id!r} is busy at node {node_id!r}, state {where!r} (step {state.seq}), "
            f"and graph {prepared.definition.name!r} rejects messages then: send it again "
            "once the run waits for one",
            run_id=run_id,
            node=node_id,
            state=where,
            step=state.seq,
        )
    if waiting:
        why = f"has {waiting} message(s) still to take"
    else:
        gates = ", ".join(state.interrupts) or "none"
        why = f"is {state.status} and no open gate takes a message (open: {gates})"
    return RunBusyError(
        f"run {run_id!r} {why} (step {state.seq}), and graph {prepared.definition.name!r} "
        "rejects messages then: send it again once the run waits for one",
        run_id=run_id,
        node=None,
        state=None,
        step=state.seq,
    )


def encode_message(payload: Mapping[str, Any]) -> bytes:
    """A message's payload as the inbox keeps it (canonical msgpack).

    Raises:
        InputError: The payload holds a value phasegraph cannot store.
    """
    try:
        body: bytes = _envelope.encode_value(dict(payload))
    except Exception as exc:  # CodecError, or a key that is no string
        raise InputError(f"the message cannot be stored: {exc}") from exc
    return body


def decode_message(body: bytes) -> Mapping[str, Any]:
    """The payload :func:`encode_message` wrote (a non-mapping reads as ``{"value": ...}``)."""
    value = _envelope.decode_value(body)
    return value if isinstance(value, Mapping) else {"value": value}


def taken_by(record: StepRecord) -> str | None:
    """The id of the message ``record`` delivered, if it delivered one."""
    if record.kind != "reply":
        return None
    for event in record.events:
        taken = event.get(MESSAGE_EVENT)
        if isinstance(taken, Mapping) and isinstance(taken.get("id"), str):
            return str(taken["id"])
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """What became of a message sent to a run.

    Attributes:
        id: The message's id (the sender's, or one made for it).
        position: Its place in the run's inbox (1 for the first message).
        duplicate: A message with this id was kept already: this one was not taken in,
            and the one kept stands for it.
        taken: The run has taken it (delivered to a gate or a busy node).
        state: The run as it was when the answer was made.
    """

    id: str
    position: int
    duplicate: bool
    taken: bool
    state: RunState


def check_message_id(message_id: str) -> str:
    """A sender's message id, checked: 1 to 200 printable characters.

    Raises:
        InputError: It is empty, too long or holds a control character.
    """
    if not message_id or len(message_id) > MAX_MESSAGE_ID or not message_id.isprintable():
        raise InputError(
            f"message id {message_id[:40]!r}: expected 1 to {MAX_MESSAGE_ID} printable characters"
        )
    return message_id


def refusal_for(prepared: PreparedGraph, state: RunState, *, waiting: int) -> RunBusyError | None:
    """Why a message sent now is refused (``reject`` while busy), or ``None`` if it is not.

    Args:
        prepared: The graph the run follows.
        state: The run as it is now.
        waiting: How many messages of its inbox the run has yet to take.
    """
    target = message_target(prepared, state)
    busy = _busy_nodes(prepared, state)
    if target is not None and target.gate is not None:
        policy = message_policy(prepared, target.node)
        if policy is BusyPolicy.REJECT and waiting:
            return busy_refusal(prepared, state, waiting=waiting)
        return None
    if target is not None:  # a busy node takes it, cut short (interrupt, rollback)
        return None
    if message_policy(prepared, busy[0] if busy else None) is BusyPolicy.REJECT:
        return busy_refusal(prepared, state, waiting=waiting)
    return None


def no_messages(prepared: PreparedGraph, state: RunState) -> RunStateError | None:
    """Why the run takes no message at all (finished, or its graph takes none), if so."""
    run_id = state.run_id
    if prepared.definition.busy is None:
        return RunStateError(
            f"run {run_id!r} takes no messages: graph {prepared.definition.name!r} declares "
            "no `busy:` (what a message does while the run is busy)",
            run_id=run_id,
        )
    if state.status.terminal:
        return RunStateError(
            f"run {run_id!r} already {state.status}; it takes no more messages", run_id=run_id
        )
    return None
