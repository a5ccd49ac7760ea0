"""A graph's plans as its definition declares them: templates, and what they write.

A node whose state is bound to ``plan:`` makes child nodes from the binding's template
when a run reaches it (:mod:`phasegraph.run._plans`). These queries read the declaration
only: every template (nested ones too), the machines templates use, the keys a node's
plans write. Pure functions of :mod:`phasegraph.model` values, used where the graph is
loaded, checked and prepared.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from phasegraph import model

__all__ = [
    "item_settings",
    "node_machines",
    "plan_bindings",
    "plan_templates",
    "plan_writes",
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
