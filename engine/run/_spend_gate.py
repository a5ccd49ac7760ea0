"""The run's budget gate: one question to a person when model calls run out of budget.

A model call the run's budget cannot reserve (:mod:`phasegraph.run._spend`) fires its
binding's ``budget_out`` trigger when the binding maps one; otherwise its node waits
where it is and the run's one budget gate (id ``RUN:budget``, kind :data:`BUDGET_GATE`)
opens — once, however many nodes run out: a node that runs out while it is open joins
the nodes it names. It is answered with one of :data:`ANSWERS`:

* ``more``: the payload's ``tokens`` and/or ``money`` are added to the run's limits, and
  every waiting node's call runs again (reserving anew);
* ``stop``: every waiting node fails as its action would have (its state's ``error``
  trigger if it takes one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from phasegraph.actions import ActionResult
from phasegraph.errors import ActionError, RunStateError, SpendRefusedError
from phasegraph.model import (
    MICROS,
    Interrupt,
    NodeState,
    NodeStatus,
    RunState,
    SpendLimit,
    replace,
)
from phasegraph.run._spend import GRANTED, totals

__all__ = [
    "ANSWERS",
    "BUDGET_GATE",
    "MORE",
    "REFUSED",
    "STOP",
    "budget_interrupt",
    "grant",
    "refusal",
    "waiting",
]

BUDGET_GATE: Final = "budget"
"""The interrupt kind of the gate that asks a person for more budget."""

REFUSED: Final = "refused"
"""The key of a budget wait step's result that holds the refusal (what replay feeds)."""

MORE: Final = "more"
STOP: Final = "stop"
ANSWERS: Final = (MORE, STOP)
"""The answers the budget gate takes, in the order they are offered."""


def gate_id(run_id: str) -> str:
    """The id of the run's budget gate."""
    return f"{run_id}:{BUDGET_GATE}"


def waiting(interrupt: Interrupt) -> tuple[str, ...]:
    """The nodes the budget gate holds, in the order they ran out."""
    nodes = interrupt.payload.get("nodes") or (interrupt.node,)
    return tuple(str(node) for node in nodes)


def _shown(amounts: Mapping[str, int | None]) -> dict[str, Any]:
    """Amounts as a person reads them: tokens, and money in the price table's currency."""
    shown: dict[str, Any] = {}
    if amounts.get("tokens") is not None:
        shown["tokens"] = amounts["tokens"]
    money = amounts.get("money")
    if money is not None:
        shown["money"] = money / MICROS
    return shown


def budget_interrupt(
    state: RunState,
    node_id: str,
    error: SpendRefusedError,
    budget: SpendLimit | None,
    now: datetime,
) -> tuple[Interrupt, bool]:
    """The budget gate once ``node_id`` has run out, and whether this opens it."""
    open_now = state.interrupts.get(gate_id(state.run_id))
    if open_now is not None:
        nodes = [*waiting(open_now), node_id]
        joined = {**open_now.payload, "nodes": list(dict.fromkeys(nodes))}
        return replace(open_now, payload=MappingProxyType(joined)), False
    standing = totals(state, budget) if budget is not None else {}
    payload: dict[str, Any] = {
        "nodes": [node_id],
        "asked": _shown(error.asked),
        "left": _shown(error.left),
        "question": (
            f"the run's budget cannot reserve node {node_id!r}'s next model call "
            f"({error.message}). Answer more (with --payload tokens=N and/or money=X to "
            "add to the limit) or stop."
        ),
    }
    if standing:
        payload["limit"] = _shown(standing["limit"])
        payload["spent"] = _shown(standing["spent"])
    interrupt = Interrupt(
        id=gate_id(state.run_id),
        node=node_id,
        kind=BUDGET_GATE,
        payload=MappingProxyType(payload),
        created_at=now,
    )
    return interrupt, True


def _amount(payload: Mapping[str, Any], key: str, interrupt: Interrupt) -> float:
    raw = payload.get(key, 0)
    try:
        value = float(raw) if isinstance(raw, int | float | str) else -1.0
    except ValueError:
        value = -1.0
    if isinstance(raw, bool) or value < 0 or value != value or value == float("inf"):
        raise RunStateError(
            f"gate {interrupt.id!r}: {key} must be a number not below 0, not {raw!r}"
        )
    return value


def grant(
    state: RunState, interrupt: Interrupt, answer: ActionResult
) -> Mapping[str, NodeState] | ActionError:
    """What an answer to the budget gate does: the nodes it changes, or why they fail.

    ``more`` adds the payload's ``tokens`` and ``money`` to the run's limits (kept in
    the counters of the node that opened the gate) and sets every waiting node running
    again; ``stop`` returns the error they fail with.

    Raises:
        RunStateError: The answer is none of :data:`ANSWERS`, or ``more`` grants nothing.
    """
    if answer.trigger == STOP:
        reason = answer.payload.get("reason")
        why = f": {reason}" if reason else ""
        return ActionError(f"the run's budget ran out; answered stop{why}")
    if answer.trigger != MORE:
        raise RunStateError(
            f"gate {interrupt.id!r} asks for more budget: answer {', '.join(ANSWERS)}, "
            f"not {answer.trigger!r}"
        )
    tokens = _amount(answer.payload, "tokens", interrupt)
    money = _amount(answer.payload, "money", interrupt)
    if not tokens and not money:
        raise RunStateError(
            f"gate {interrupt.id!r}: more needs what to add, as the payload's tokens and/or "
            "money (phasegraph reply ... --trigger more --payload tokens=5000)"
        )
    opener = state.nodes[interrupt.node]
    counters = dict(opener.counters)
    for kind, units in (("tokens", round(tokens)), ("money", round(money * MICROS))):
        if units:
            counters[GRANTED[kind]] = counters.get(GRANTED[kind], 0) + units
    nodes: dict[str, NodeState] = {
        interrupt.node: replace(opener, counters=MappingProxyType(counters))
    }
    for node_id in waiting(interrupt):
        node = nodes.get(node_id) or state.nodes.get(node_id)
        if node is not None and node.status is NodeStatus.WAITING:
            nodes[node_id] = replace(node, status=NodeStatus.RUNNING)
    return MappingProxyType(nodes)


def refusal(recorded: Mapping[str, Any], node_id: str) -> SpendRefusedError:
    """The refusal a budget wait step recorded (its result's :data:`REFUSED`), again."""
    return SpendRefusedError(
        str(recorded.get("message", "")),
        asked={str(k): int(v) for k, v in dict(recorded.get("asked") or {}).items()},
        left={str(k): int(v) for k, v in dict(recorded.get("left") or {}).items()},
        used={str(k): int(v) for k, v in dict(recorded.get("used") or {}).items()},
        node_id=node_id,
    )
