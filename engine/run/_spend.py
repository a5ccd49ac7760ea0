"""A run's budget for model calls: reserved before each call, settled by the step's commit.

A graph's ``budget:`` (:class:`~phasegraph.model.SpendLimit`) limits what every model
call of the run spends together, in tokens and in money. Each call reserves its most —
its ``max_tokens`` and its prompt's size, estimated high — before it is sent; the
reservation is a ledger entry of the node's step in flight (index :data:`RESERVE_INDEX`),
committed as a ``reserve`` step. The run's committed total is what every node has spent
(its ``tokens`` and ``money`` counters) plus every reservation outstanding; a call is
reserved only if that total stays within the limit, checked and committed under the
run's commit lock, so nodes running in parallel never reserve past it together.

* **Settled** when the step commits: the step's spend (what the answer's usage says)
  goes to the node's counters and the reservation is dropped with the step's ledger.
* **Released** when the call fails: the failed step drops the ledger, spending nothing.
* **Left by a crash** (a node due to start its action, in a process that just took the
  run over, whose step holds a reservation: no action of this process made it): as for a
  ``once`` effect whose intent has no result, nobody knows whether the provider answered
  and charged. The model call is idempotent, so it runs again (the rule of every
  idempotent action); before it does, the run commits a ``settle`` step that charges
  the crashed call at its reserved most (its outcome is taken to be that it happened)
  and drops the reservation. It is counted once: the charge replaces the reservation.

Money is counted in millionths (:data:`~phasegraph.model.MICROS`) of the price table's
currency. What a reply to the budget gate grants is kept in the counters of the node
whose refusal opened it (:data:`GRANTED`), so it is part of the run's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from phasegraph.errors import ActionError, SpendRefusedError
from phasegraph.model import (
    MICROS,
    PATH_SEPARATOR,
    Effect,
    LedgerEntry,
    NodeState,
    OnUnknown,
    RunState,
    SpendLimit,
)

__all__ = [
    "GRANTED",
    "KINDS",
    "RESERVE_INDEX",
    "RESERVE_STEP",
    "SETTLE_STEP",
    "budget_line",
    "budget_view",
    "left",
    "price",
    "reservation",
    "reserve",
    "reserved",
    "spent",
    "totals",
]

RESERVE_INDEX: Final = -2
"""The ledger index of a step's reservation (-1 is a ``once`` action's own intent)."""

RESERVE_STEP: Final = "reserve"
"""The kind of the step that commits a reservation."""

SETTLE_STEP: Final = "settle"
"""The kind of the step that charges a reservation a crashed process left."""

KINDS: Final = ("tokens", "money")
"""What a budget counts: tokens, and money in millionths."""

GRANTED: Final = {"tokens": "tokens_granted", "money": "money_granted"}
"""The counter that holds what a reply to the budget gate added to a limit."""

_RESERVED: Final = {kind: kind for kind in KINDS}


def _leaf(key: str) -> str:
    """A counter's budget name without its nesting prefix (``think/tokens``: ``tokens``)."""
    return key.rpartition(PATH_SEPARATOR)[2]


def _sum_counters(nodes: Mapping[str, NodeState], names: Mapping[str, str]) -> dict[str, int]:
    """Each kind → the sum of the counters named ``names[kind]`` over every node."""
    found = dict.fromkeys(names, 0)
    wanted = {name: kind for kind, name in names.items()}
    for node in nodes.values():
        for key, units in node.counters.items():
            kind = wanted.get(_leaf(key))
            if kind is not None:
                found[kind] += int(units)
    return found


def reservation(node: NodeState) -> LedgerEntry | None:
    """The node's outstanding reservation, if its step in flight has one."""
    return next((e for e in node.ledger if e.index == RESERVE_INDEX), None)


def reserved(entry: LedgerEntry | None) -> dict[str, int]:
    """What a reservation holds, by kind (nothing for ``None``)."""
    if entry is None:
        return dict.fromkeys(KINDS, 0)
    return {kind: int(entry.arguments.get(kind, 0)) for kind in KINDS}


def spent(state: RunState) -> dict[str, int]:
    """What the run's nodes have spent, by kind (settled steps only)."""
    return _sum_counters(state.nodes, _RESERVED)


def totals(state: RunState, budget: SpendLimit) -> dict[str, dict[str, int | None]]:
    """The run's budget as it stands: ``limit``, ``spent``, ``reserved`` and ``left``.

    Each maps ``tokens`` and ``money`` (millionths); a limit the graph does not set is
    ``None``, and so is what is left of it.
    """
    granted = _sum_counters(state.nodes, GRANTED)
    held = dict.fromkeys(KINDS, 0)
    for node in state.nodes.values():
        for kind, units in reserved(reservation(node)).items():
            held[kind] += units
    used = spent(state)
    limits = {"tokens": budget.tokens, "money": budget.money_micros}
    limit = {k: None if v is None else v + granted[k] for k, v in limits.items()}
    return {
        "limit": dict(limit),
        "spent": dict(used),
        "reserved": dict(held),
        "left": {k: None if v is None else max(0, v - used[k] - held[k]) for k, v in limit.items()},
    }


def left(state: RunState, budget: SpendLimit) -> dict[str, int | None]:
    """What the run's budget has left, by kind (``None``: not limited)."""
    return totals(state, budget)["left"]


def price(budget: SpendLimit | None, models: Sequence[str], prompt: int, completion: int) -> int:
    """The cost in millionths of a call to the first of ``models`` with a price (0: none)."""
    if budget is None:
        return 0
    for model in models:
        found = budget.prices.get(model)
        if found is not None:
            return found.micros(prompt, completion)
    return 0


def _asked(
    budget: SpendLimit, models: Sequence[str], prompt: int, completion: int, node_id: str
) -> dict[str, int]:
    """What a call reserves, by kind.

    Raises:
        ActionError: The budget limits money and no model name has a price.
    """
    if budget.money is not None and not any(m in budget.prices for m in models):
        names = " or ".join(repr(m) for m in dict.fromkeys(models))
        raise ActionError(
            f"the run's budget limits money, but model {names} has no price in "
            "budget.prices: the call cannot be bounded",
            node_id=node_id,
        )
    return {"tokens": prompt + completion, "money": price(budget, models, prompt, completion)}


def reserve(
    state: RunState,
    budget: SpendLimit,
    node_id: str,
    *,
    effect_id: str,
    call: tuple[Sequence[str], int, int],
    used: Mapping[str, int],
) -> LedgerEntry | SpendRefusedError:
    """The reservation of one model call of ``node_id``, or why it does not fit.

    The reservation covers the call's most (``call``: model names, prompt tokens,
    completion tokens) and what the step's earlier answers spent (``used``); it
    replaces the step's earlier one. It fits if the run's spent total, every other
    reservation and this one stay within each limit. A pure function of ``state``: the
    caller commits the entry before anything else is committed.

    Raises:
        ActionError: The budget limits money and the model has no price.
    """
    models, prompt, completion = call
    asked = _asked(budget, models, prompt, completion, node_id)
    already = {k: int(used.get(k, 0)) for k in KINDS}
    whole = {k: already[k] + asked[k] for k in KINDS}
    standing = totals(state, budget)
    mine = reserved(reservation(state.nodes[node_id]))
    short = {}
    for kind in KINDS:
        limit = standing["limit"][kind]
        if limit is None:
            continue
        spent_kind, held_kind = standing["spent"][kind], standing["reserved"][kind]
        others = (spent_kind or 0) + (held_kind or 0) - mine[kind]
        if others + whole[kind] > limit:
            short[kind] = max(0, limit - others - already[kind])
    if short:
        return SpendRefusedError(
            f"the run's budget cannot reserve {_said(asked)} for a call of "
            f"{models[0]!r}: {_said(short)} left",
            asked=asked,
            left=short,
            used=already,
            node_id=node_id,
        )
    return LedgerEntry(
        id=f"{effect_id}:spend",
        index=RESERVE_INDEX,
        arguments=MappingProxyType({**whole, "model": models[0]}),
        effect=Effect.IDEMPOTENT,
        on_unknown=OnUnknown.RETRY,
    )


def _said(amounts: Mapping[str, int]) -> str:
    """``3000 tokens and 0.012 money``: what a refusal names."""
    parts = []
    if "tokens" in amounts:
        parts.append(f"{amounts['tokens']} tokens")
    if amounts.get("money"):
        parts.append(f"{amounts['money'] / MICROS:g} money")
    return " and ".join(parts) or "nothing"


def _in_units(amounts: Mapping[str, int | None]) -> dict[str, float | int | None]:
    """Amounts as shown: tokens as they are, money in the price table's currency."""
    money = amounts.get("money")
    return {"tokens": amounts.get("tokens"), "money": None if money is None else money / MICROS}


def budget_view(state: RunState, budget: SpendLimit | None) -> dict[str, Any] | None:
    """``RunBudget``: the run's budget as it stands, money in the price table's currency.

    ``limit``, ``spent``, ``reserved`` and ``left``, each with ``tokens`` and ``money``
    (``null`` where the graph sets no limit); ``None`` for a run whose graph sets no
    budget and whose model calls spent nothing.
    """
    if budget is None:
        used = spent(state)
        if not any(used.values()):
            return None
        budget = SpendLimit()
    standing = totals(state, budget)
    return {key: _in_units(amounts) for key, amounts in standing.items()}


def budget_line(view: Mapping[str, Any]) -> str:
    """One line of ``status``: what the budget has left of its limits, what was spent."""
    parts = []
    for kind in KINDS:
        used, limit, left_now = view["spent"][kind], view["limit"][kind], view["left"][kind]
        if limit is None and not used:
            continue
        said = f"{used:g} {kind} spent" if isinstance(used, float) else f"{used} {kind} spent"
        if limit is not None:
            said += f", {left_now:g} left of {limit:g}"
        held = view["reserved"][kind]
        if held:
            said += f" ({held:g} reserved)"
        parts.append(said)
    return "budget: " + ("; ".join(parts) or "nothing spent")
