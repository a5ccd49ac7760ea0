"""Plans as the YAML declares them: a ``plan:`` binding's template, checked as a node is.

A node whose state is bound to ``plan:`` turns a plan an earlier step wrote into child
nodes, each made from the binding's ``template``. Nothing about the plan is known when
the graph loads, so what can be proved is proved for *any* plan: the template is a node
like any other (its machine, hooks and triggers, its ``with:``), each key the children
write has a reducer (children the plan leaves unordered may run at the same time), and
the schema of an item's fields is a JSON Schema whose properties the child reads.
The plan itself is validated when the run reaches it (:mod:`phasegraph.run._plans`).
"""

from __future__ import annotations

from collections.abc import Mapping

from phasegraph.core._plans import template_label
from phasegraph.spec._input import input_schema_problems
from phasegraph.spec._models import Loc, PlanSpec

__all__ = ["plan_problems"]


def plan_problems(owner: str, plan: PlanSpec, reducers: Mapping[str, str]) -> list[tuple[Loc, str]]:
    """What is wrong with a plan binding for any plan it may get: (place in it, message).

    Args:
        owner: The id of the node (or template) that binds it.
        plan: The binding's ``plan:``.
        reducers: The graph's reducers.
    """
    label = template_label(owner)
    found: list[tuple[Loc, str]] = []
    if plan.settings is not None:
        found += [
            (("plan", "settings"), f"node {owner!r}: plan.settings {problem.message}")
            for problem in input_schema_problems(plan.settings)
        ]
    shared = [key for key in plan.template.writes or () if key not in reducers]
    if shared:
        keys = ", ".join(map(repr, shared))
        found.append(
            (
                ("plan", "template", "writes"),
                f"children {label} may run at the same time and all write {keys}: declare "
                f"a reducer for each (reducers: {{{shared[0]}: append}}), or have each child "
                f"hand its value to node {owner!r} with `result:` and `into:`",
            )
        )
    if plan.into is not None and plan.into in (plan.template.writes or ()):
        found.append(
            (
                ("plan", "into"),
                f"node {owner!r} gathers its children's results into {plan.into!r}, which "
                "the children write too: give the children's own key another name",
            )
        )
    return found
