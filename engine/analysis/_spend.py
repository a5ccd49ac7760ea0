"""Model calls under a finite budget: what ``check`` proves when a graph's budget is ``required``.

A graph whose ``budget:`` says ``required: true`` asks ``check`` to prove that every model
call it can make (each ``llm:`` binding, of a node or of a plan's template, and the
summaries its compression asks for) reserves a finite most against a finite limit:

* the budget limits tokens, or it limits money and the call's model (and auxiliary
  model) has a price: otherwise nothing bounds what the call spends;
* the binding sets ``max_tokens``: otherwise what its answer may spend has no bound (the
  run reserves a default for it, which the provider need not keep to).

Each call that is not proved is an error naming the node, the hook and the model. Any
graph with a budget also gets a warning for a call whose ``max_tokens`` alone is more than
the token limit: it can never be reserved without a person adding more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.model import ActionDef, GraphDef, NodeDef, SpendLimit

__all__ = ["spend_findings"]


def _calls(nodes: tuple[NodeDef, ...] | list[NodeDef]) -> Iterator[tuple[str, str, ActionDef]]:
    """Every ``llm:`` binding: (node id, hook, binding), plan templates' ones included."""
    for node in nodes:
        for hook, action in node.bind.items():
            if action.kind == "llm":
                yield node.id, hook, action
            if action.template is not None:
                yield from _calls([action.template])


def _unbounded(budget: SpendLimit | None, request: Mapping[str, Any]) -> list[str]:
    """Why a call's spend is not bounded (empty: it is)."""
    why = []
    models = [str(m) for m in (request.get("model"), request.get("auxiliary_model")) if m]
    if budget is None or not budget.finite:
        why.append("the graph's budget sets no tokens or money limit")
    elif budget.tokens is None:
        unpriced = [m for m in models if m not in budget.prices]
        if unpriced:
            names = ", ".join(repr(m) for m in unpriced)
            why.append(f"the budget limits only money and {names} has no price in budget.prices")
    if request.get("max_tokens") is None:
        why.append("it sets no max_tokens, so what its answer may spend has no bound")
    return why


def _too_big(budget: SpendLimit, request: Mapping[str, Any]) -> str | None:
    """Why a call can never be reserved: its answer alone is more than the token limit."""
    most = request.get("max_tokens")
    if budget.tokens is None or most is None or int(most) <= budget.tokens:
        return None
    return (
        f"its max_tokens ({most}) alone is more than the run's budget of {budget.tokens} "
        "tokens: every call asks a person for more before it is sent"
    )


def spend_findings(definition: GraphDef) -> list[Finding]:
    """What ``check`` finds about the graph's model calls and its budget.

    An error for each call not under a finite budget, when the graph requires it; a
    warning for each that the budget as declared can never reserve.
    """
    budget = definition.budget
    if budget is None:
        return []
    findings = []
    for node_id, hook, action in _calls(definition.nodes):
        request: Mapping[str, Any] = action.config.get("llm") or {}
        head = f"node {node_id!r}: the model call bound to hook {hook!r}"
        too_big = _too_big(budget, request)
        if too_big is not None:
            findings.append(
                Finding(
                    severity=Severity.WARNING,
                    code=Code.CALL_OVER_BUDGET,
                    message=f"{head} never fits the run's budget: {too_big}",
                    location=action.location,
                )
            )
        why = _unbounded(budget, request) if budget.required else []
        if why:
            findings.append(
                Finding(
                    severity=Severity.ERROR,
                    code=Code.UNBUDGETED_CALL,
                    message=(
                        f"{head} (model {request.get('model')!r}) is not under a finite "
                        f"budget, as budget.required asks: {'; '.join(why)}"
                    ),
                    location=action.location,
                )
            )
    return findings
