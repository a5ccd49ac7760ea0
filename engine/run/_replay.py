"""Replay a run's history without running actions, and find where it diverges.

:func:`replay_history` rebuilds the run from its seq-0 snapshot and re-drives the machines
step by step with the pure :class:`~phasegraph.run._steps.StepBuilder`, feeding each step the
action result (or reply) that was recorded for it — no action runs. Each step it produces
is compared with the recorded one (kind, node, source, trigger, dest, node states, run
status, data); the first difference is reported as a :class:`Divergence`. Replayed
against a changed definition, this finds the first step where the new definition would
have gone another way.

Replies and cancellations come from outside the run and are re-applied as recorded.

The order of decisions is not re-implemented here: the interpreter and replay both ask
:meth:`~phasegraph.run._steps.StepBuilder.decide`. Each record keeps what replay needs to
feed a result again: its trigger, payload, output and data, with the raw update of any
key a reducer combined.

Limits: a result refused because part of it could not be stored is recorded with its
trigger only; an action that raised is re-fed as an error with the recorded message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phasegraph import codec
from phasegraph.actions import ActionResult
from phasegraph.codec import _envelope
from phasegraph.codec._history import record_json
from phasegraph.errors import PhasegraphError, RunError
from phasegraph.model import (
    EMPTY,
    MIGRATE,
    NodeState,
    NodeStatus,
    RunState,
    StepRecord,
    apply_records,
    frozen_map,
    replace,
)
from phasegraph.run._prepare import PreparedGraph
from phasegraph.run._spend import SETTLE_STEP
from phasegraph.run._spend_gate import REFUSED, refusal
from phasegraph.run._steps import StepBuilder
from phasegraph.run._stored import decode_stored, missing_record
from phasegraph.store.base import Store
from phasegraph.views import jsonable

__all__ = [
    "COMPARED_FIELDS",
    "Divergence",
    "ReplayReport",
    "differing_fields",
    "replay_history",
    "report_view",
]

COMPARED_FIELDS = (
    *("kind", "node", "source", "trigger", "dest", "nodes", "status", "data", "appended"),
    *("ledger", "plan"),
)
"""The step-record fields a replayed step must reproduce exactly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """The first step where a replay does not reproduce the recorded history.

    Attributes:
        seq: The step that differs.
        node: The node the recorded step moved, if any.
        reason: Why, in one sentence.
        fields: The compared fields that differ (empty when no step could be replayed).
        recorded: The step as recorded.
        replayed: The step the replay produced instead, if it could produce one.
    """

    seq: int
    node: str | None
    reason: str
    fields: tuple[str, ...]
    recorded: StepRecord
    replayed: StepRecord | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayReport:
    """The outcome of replaying a run.

    Attributes:
        run_id: The run replayed.
        graph: The name of the graph it was replayed against.
        graph_changed: Whether that graph differs from the one the run started with.
        head: The last recorded seq.
        steps: How many steps (after seq 0) were reproduced exactly.
        divergence: The first step that was not, or ``None`` if all were.
    """

    run_id: str
    graph: str
    graph_changed: bool
    head: int
    steps: int
    divergence: Divergence | None = None

    @property
    def identical(self) -> bool:
        """Whether every recorded step was reproduced exactly."""
        return self.divergence is None


async def replay_history(
    store: Store,
    prepared: PreparedGraph,
    first: RunState,
    migrated: Callable[[RunState], Awaitable[PreparedGraph]] | None = None,
) -> ReplayReport:
    """Re-drive a run from its seq-0 state ``first`` against ``prepared``; no action runs.

    A ``migrate`` step is taken as recorded; from there the replay follows the definition
    it moved to (loaded by ``migrated``; without it, ``prepared`` goes on).

    Raises:
        RunNotFoundError: No such run.
        CodecError: A stored record is corrupt, of a newer format or missing.
    """
    replayer = _Replayer(prepared, first)
    steps, head, divergence = 0, first.seq, None
    async for seq, blob in store.history(first.run_id, start=first.seq + 1):
        if seq != head + 1:
            raise missing_record(first.run_id, head + 1, seq)
        head = seq
        if divergence is not None:
            continue  # only to learn the head; records are not decoded any more
        record = decode_stored(first.run_id, seq, blob, codec.decode_record)
        if record.seq != seq:
            raise missing_record(first.run_id, seq, record.seq)
        if record.kind == MIGRATE and migrated is not None:
            after = apply_records(replayer.state, (record,))
            replayer.migrate(record, await migrated(after))
            steps += 1
            continue
        divergence = replayer.step(record)
        steps += divergence is None
    return ReplayReport(
        run_id=first.run_id,
        graph=prepared.definition.name,
        graph_changed=prepared.definition.digest != first.graph_digest,
        head=head,
        steps=steps,
        divergence=divergence,
    )


class _RecordedTime:
    """A clock that tells the time of the step being replayed."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


# Not a PhasegraphError: it stands in for any exception, so it classifies as a foreign one.
class _RecordedError(PhasegraphError):
    """Stands in for an exception an action raised: only its message was recorded.

    A phasegraph error, so that its message is taken as it was recorded (type and place
    of the original included), not described again.
    """


class _Replayer:
    """Holds the replayed state and reproduces one recorded step at a time."""

    def __init__(self, prepared: PreparedGraph, first: RunState) -> None:
        self._clock = _RecordedTime(first.updated_at)
        self._steps = StepBuilder(prepared, self._clock, first.plans)
        self._state = _fit_nodes(first, self._steps.prepared)
        # Running nodes in the order they became due, as the interpreter keeps them.
        self._due = [n for n, s in self._state.nodes.items() if s.status is NodeStatus.RUNNING]

    @property
    def state(self) -> RunState:
        """The replayed state so far."""
        return self._state

    def migrate(self, recorded: StepRecord, prepared: PreparedGraph) -> None:
        """Take a recorded ``migrate`` step; the next steps are replayed on ``prepared``."""
        self._clock.at = recorded.time
        self._steps = self._steps.moved_to(prepared, self._state.plans)
        self._apply_step(recorded)

    def step(self, recorded: StepRecord) -> Divergence | None:
        """Reproduce ``recorded`` and apply it, or say how the replay differs."""
        self._clock.at = recorded.time
        try:
            replayed = self._replay(recorded)
        # A changed definition may lack a recorded state, node or trigger.
        except (PhasegraphError, LookupError) as exc:
            replayed = f"the replayed definition cannot take this step: {exc}"
        fields: tuple[str, ...] = ()
        produced: StepRecord | None = None
        if isinstance(replayed, str):
            reason = replayed
        else:
            fields, produced = differing_fields(recorded, replayed), replayed
            if not fields:
                self._apply_step(replayed)
                return None
            reason = f"the replayed step differs in {', '.join(fields)}"
        return Divergence(
            seq=recorded.seq,
            node=recorded.node,
            reason=reason,
            fields=fields,
            recorded=recorded,
            replayed=produced,
        )

    def _apply_step(self, record: StepRecord) -> None:
        self._state = self._steps.apply(self._state, record)
        node = record.node
        if node is None:
            return
        if record.ledger is not None:
            # The node's action is running (it committed this): it is no longer due, as
            # the interpreter no longer lists it, until its outcome is fed.
            if node in self._due:
                self._due.remove(node)
            return
        # A reply to the budget gate moves every node it held, beside its own.
        moved = (
            [node, *(n for n in record.nodes if n != node)] if record.kind == "reply" else [node]
        )
        for node in moved:
            running = self._state.nodes[node].status is NodeStatus.RUNNING
            if running and node not in self._due:
                self._due.append(node)
            elif not running and node in self._due:
                self._due.remove(node)

    def _replay(self, recorded: StepRecord) -> StepRecord | str:
        """The step the interpreter would take here, given the recorded outside inputs."""
        if recorded.kind == "reply":
            return self._reply(recorded)
        if recorded.ledger is not None and recorded.node is not None:
            # What an action committed while it ran is fed as it was, like its outcome.
            return self._steps.ledger_step(self._state, recorded.node, recorded.ledger)
        if recorded.kind == "cancel":
            reason = next((str(e["message"]) for e in recorded.events if "message" in e), "")
            return self._steps.cancel(self._state, reason, recorded.actor)
        acted = self._is_action_outcome(recorded)
        taken_over = recorded.kind == SETTLE_STEP or (recorded.kind == "wait" and not acted)
        if taken_over and recorded.node and recorded.node not in self._due:
            # A process took the run over here (it settles a reservation, or asks a person
            # about a call in flight): every running node was due again for it.
            self._due.append(recorded.node)
        decided = self._steps.decide(self._state, self._due, deadlines=not acted)
        if decided is None:
            return f"the replayed run has nothing more to do here (it is {self._state.status})"
        if isinstance(decided, StepRecord):
            return decided
        if not acted:
            waiting = self._due[0] if self._due else recorded.node
            return (
                f"the replay would wait for the action of node {waiting!r} here; "
                f"the recorded run took a {recorded.kind!r} step"
            )
        return self._feed(recorded)

    def _is_action_outcome(self, recorded: StepRecord) -> bool:
        """Whether ``recorded`` is what a running node's action led to."""
        node = None if recorded.node is None else self._state.nodes.get(recorded.node)
        running = node is not None and node.status is NodeStatus.RUNNING
        if running and recorded.kind == "wait":  # out of budget: the action's outcome
            return REFUSED in recorded.result
        return running and recorded.kind in ("transition", "fail")

    def _feed(self, recorded: StepRecord) -> StepRecord:
        """Give the node its recorded action outcome, as the interpreter took it."""
        node_id = recorded.node or ""
        if recorded.kind == "wait":
            refused = refusal(recorded.result[REFUSED], node_id)
            return self._steps.budget_out(self._state, node_id, refused, ())
        if recorded.kind == "transition" or "trigger" in recorded.result:
            return self._fire(node_id, self._result(recorded))
        error = _RecordedError(recorded.nodes[node_id].error or "the action failed")
        return self._steps.action_failed(self._state, node_id, error, recorded.events)

    def _fire(self, node_id: str, result: ActionResult) -> StepRecord:
        """Fire a result as the interpreter does: a refused trigger fails the node."""
        try:
            return self._steps.transition(self._state, node_id, result, ())
        except RunError as exc:
            return self._steps.node_failed(self._state, node_id, exc, (), result)

    def _reply(self, recorded: StepRecord) -> StepRecord | str:
        pending = self._state.interrupts
        answered = next((str(e["id"]) for e in recorded.events if e.get("id") in pending), None)
        if answered is None:
            return "the replay has no pending interrupt for this reply"
        # Who answered is an outside input, fed as recorded (and checked when it was given).
        result = self._result(recorded)
        return self._steps.answer(self._state, answered, result, actor=recorded.actor, trusted=True)

    def _result(self, recorded: StepRecord) -> ActionResult:
        """The action result (or reply) that produced ``recorded``, as it was returned.

        Data is recorded after reducers; the raw update of each reduced key is kept in
        the record's result, so nothing has to be worked back out of a reducer. A list the
        step extended is recorded as the items it added: the action returned the list it
        had plus those items.
        """
        result = recorded.result
        raw = result.get("data", EMPTY)
        data = recorded.data
        if recorded.appended:
            before = self._state.data
            extended = {k: [*before.get(k, ()), *v] for k, v in recorded.appended.items()}
            data = frozen_map({**data, **extended})
        return ActionResult(
            trigger=recorded.trigger or str(result.get("trigger", "")),
            data=frozen_map({**data, **raw}) if raw else data,
            payload=result.get("payload", EMPTY),
            output=result.get("output", EMPTY),
            spend=result.get("spend", EMPTY),
        )


def _fit_nodes(first: RunState, prepared: PreparedGraph) -> RunState:
    """Give the seq-0 state the replayed graph's nodes (new ones pending, gone ones dropped)."""
    wanted = [node.id for node in prepared.definition.nodes]
    if set(wanted) == set(first.nodes):
        return first
    nodes = {node_id: first.nodes.get(node_id, NodeState()) for node_id in wanted}
    return replace(first, nodes=frozen_map(nodes))


def differing_fields(recorded: StepRecord, replayed: StepRecord) -> tuple[str, ...]:
    """The :data:`COMPARED_FIELDS` in which two records differ, compared canonically.

    Values are compared by their canonical encoding, so ``1`` and ``True`` differ while a
    list and a tuple with the same items do not.
    """
    return tuple(
        name
        for name in COMPARED_FIELDS
        if _canonical(getattr(recorded, name)) != _canonical(getattr(replayed, name))
    )


def _canonical(value: Any) -> bytes:
    return _envelope.encode_value(jsonable(value))


def report_view(report: ReplayReport) -> dict[str, Any]:
    """A replay report as JSON (for ``--json`` and HTTP)."""
    divergence = report.divergence
    return {
        "run_id": report.run_id,
        "graph": report.graph,
        "graph_changed": report.graph_changed,
        "head": report.head,
        "steps": report.steps,
        "identical": report.identical,
        "divergence": None
        if divergence is None
        else {
            "seq": divergence.seq,
            "node": divergence.node,
            "reason": divergence.reason,
            "fields": list(divergence.fields),
            "recorded": record_json(divergence.recorded),
            "replayed": record_json(divergence.replayed) if divergence.replayed else None,
        },
    }
