"""Uncertain effects: a ``once`` effect whose intent was committed and whose result was not.

The process that committed the intent stopped (a crash, a lost lease) before the effect's
result was committed, so nobody knows whether it happened. The binding's policy
(:class:`~phasegraph.model.OnUnknown`) decides: ``retry`` and ``reconcile`` are left to
the action, which sees the entry in ``ctx.ledger``; ``fail`` fails the step as an action
error would (the state's ``error`` trigger if it takes one, else the node fails); ``ask`` opens
an ``outcome_unknown`` gate naming the call, its arguments and its effect id, answered
with one of :data:`ANSWERS`:

* ``happened``: the effect took place. For a tool call, the reply's payload ``result``
  (a mapping; ``{}`` when not given) is committed as the call's result and the step goes
  on. For the action itself, the payload ``trigger`` (and optional ``data``) is what the
  action returned, and fires as if it had.
* ``run_again``: run it again, with the same effect id.
* ``fail``: fail the step as an action error, saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from phasegraph.actions import ActionResult
from phasegraph.errors import ActionError, RunError, RunStateError
from phasegraph.model import Interrupt, LedgerEntry, NodeState, OnUnknown, frozen_map, replace
from phasegraph.run._spend import RESERVE_INDEX

__all__ = [
    "ANSWERS",
    "FAIL",
    "HAPPENED",
    "OUTCOME_UNKNOWN",
    "RUN_AGAIN",
    "describe",
    "effect_gate",
    "settle",
    "uncertain",
]

OUTCOME_UNKNOWN: Final = "outcome_unknown"
"""The interrupt kind of the gate that asks whether an uncertain effect happened."""

HAPPENED: Final = "happened"
RUN_AGAIN: Final = "run_again"
FAIL: Final = "fail"
ANSWERS: Final = (HAPPENED, RUN_AGAIN, FAIL)
"""The answers an ``outcome_unknown`` gate takes, in the order they are offered."""


def uncertain(node: NodeState) -> LedgerEntry | None:
    """The node's first effect whose intent is committed and whose result is not.

    A model call's reservation is no effect (:mod:`phasegraph.run._spend` settles it).
    """
    return next((e for e in node.ledger if e.result is None and e.index != RESERVE_INDEX), None)


def _what(entry: LedgerEntry) -> str:
    return f"tool call {entry.tool!r}" if entry.tool else "the action's effect"


def describe(entry: LedgerEntry) -> str:
    """Why the outcome is unknown, naming the call and its effect id."""
    return (
        f"the outcome of {_what(entry)} (effect id {entry.id}) is unknown: its intent was "
        "committed, then the step stopped before its result was"
    )


def effect_gate(entry: LedgerEntry, node_id: str, now: datetime) -> Interrupt:
    """The gate that asks a person whether ``entry``'s effect happened."""
    payload: dict[str, Any] = {
        "effect_id": entry.id,
        "index": entry.index,
        "tool": entry.tool,
        "arguments": dict(entry.arguments),
        "effect": entry.effect.value,
        "question": (
            f"{describe(entry)}. Did it happen? Answer happened (with "
            f"{'its result' if entry.tool else 'the trigger the action returned'}), "
            "run_again (same effect id) or fail."
        ),
    }
    return Interrupt(
        id=f"{entry.id}:outcome",
        node=node_id,
        kind=OUTCOME_UNKNOWN,
        payload=MappingProxyType(payload),
        created_at=now,
    )


def _entry_of(node: NodeState, interrupt: Interrupt) -> LedgerEntry:
    effect_id = interrupt.payload.get("effect_id")
    entry = next((e for e in node.ledger if e.id == effect_id), None)
    if entry is None:
        raise RunStateError(f"node {interrupt.node!r} has no uncertain effect {effect_id!r}")
    return entry


def settle(
    node: NodeState, interrupt: Interrupt, answer: ActionResult
) -> tuple[LedgerEntry, ...] | ActionResult | RunError:
    """What an answer to an ``outcome_unknown`` gate does.

    Returns the node's new ledger (the call settled, or marked to run again), the
    result to fire (the action's own effect happened) or the error that fails the node.

    Raises:
        RunStateError: The answer is none of :data:`ANSWERS`, or its payload does not say
            what ``happened`` needs.
    """
    entry = _entry_of(node, interrupt)
    payload: Mapping[str, Any] = answer.payload
    if answer.trigger == FAIL:
        reason = payload.get("reason") or payload.get("feedback")
        why = f": {reason}" if reason else ""
        return ActionError(f"{describe(entry)}; answered fail{why}", node_id=interrupt.node)
    if answer.trigger == RUN_AGAIN:
        again = replace(entry, on_unknown=OnUnknown.RETRY)
        return tuple(again if e.id == entry.id else e for e in node.ledger)
    if answer.trigger != HAPPENED:
        raise RunStateError(
            f"gate {interrupt.id!r} asks whether an effect happened: answer "
            f"{', '.join(ANSWERS)}, not {answer.trigger!r}"
        )
    if not entry.tool:  # the action's own effect: the answer says what it returned
        trigger = payload.get("trigger")
        if not isinstance(trigger, str) or not trigger:
            raise RunStateError(
                f"gate {interrupt.id!r}: happened needs the trigger the action would have "
                "returned, as the payload's trigger (phasegraph reply ... --trigger happened "
                "--payload trigger=NAME)"
            )
        return ActionResult(trigger=trigger, data=frozen_map(payload.get("data")))
    result = payload.get("result", {})
    if not isinstance(result, Mapping):
        raise RunStateError(
            f"gate {interrupt.id!r}: happened takes the call's result as a JSON object, "
            "the payload's result (phasegraph reply ... --trigger happened --payload "
            "'result={\"exit\": 0}')"
        )
    done = replace(entry, result=frozen_map(result))
    return tuple(done if e.id == entry.id else e for e in node.ledger)
