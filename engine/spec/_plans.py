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

from collections.abc import Iterable, Iterator, Mapping

from phasegraph import model
from phasegraph.spec._input import input_schema_problems
from phasegraph.spec._models import Loc, PlanSpec

__all__ = [
    "item_settings",
    "node_machines",
    "plan_bindings",
    "plan_templates",
    "plan_problems",
    "template_label",
    "with_plan_writes",
]


def template_label(owner: str) -> str:
    """How messages name the children of ``owner``'s plan: ``OWNER.*``."""
    return model.child_id(owner, "*")


def plan_bindings(
    node: model.NodeDef,
) -> Iterator[tuple[str, model.ActionDef, model.NodeDef]]:
    """Each ``plan:`` binding of ``node`` (not of its templates): hook, binding, template."""
    for hook, action in node.bind.items():
        if action.kind == "plan" and action.template is not None:
            yield hook, action, action.template


def plan_templates(nodes: Iterable[model.NodeDef]) -> list[tuple[model.NodeDef, model.ActionDef]]:
    """The template of every plan of ``nodes`` (nested ones too), with its binding."""
    found: list[tuple[model.NodeDef, model.ActionDef]] = []
    for node in nodes:
        for _, action, template in plan_bindings(node):
            found += [(template, action), *plan_templates([template])]
    return found


def item_settings(action: model.ActionDef) -> frozenset[str]:
    """The item fields a plan binding accepts as settings (its schema's properties)."""
    schema = action.config.get("plan", {}).get("settings") or {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return frozenset(map(str, properties)) if isinstance(properties, Mapping) else frozenset()


def node_machines(node: model.NodeDef) -> list[str]:
    """The machine of ``node`` and of every template of its plans, nested ones too."""
    found = [node.machine]
    for _, _, template in plan_bindings(node):
        found += node_machines(template)
    return found


def plan_writes(node: model.NodeDef) -> tuple[str, ...]:
    """The keys a node writes through its plans: what its children write, and ``into``."""
    keys: list[str] = []
    for _, action, template in plan_bindings(node):
        keys += template.writes or ()
        keys += plan_writes(template)
        into = action.config.get("plan", {}).get("into")
        if into:
            keys.append(str(into))
    return tuple(dict.fromkeys(keys))


def with_plan_writes(node: model.NodeDef) -> model.NodeDef:
    """``node`` with its declared ``writes`` widened by what its plans write.

    Its children write while it waits for them, so whatever may run beside the node may
    run beside them: the write-conflict rule counts their keys as the node's. A node
    without ``writes:`` may write anything already.
    """
    if node.writes is None:
        return node
    extra = [key for key in plan_writes(node) if key not in node.writes]
    return model.replace(node, writes=(*node.writes, *extra)) if extra else node


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
