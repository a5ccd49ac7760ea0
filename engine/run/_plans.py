"""Plans made at run time: a node's plan becomes its children, and the node joins them.

A node whose state is bound to ``plan:`` reads a plan that an earlier step wrote to the
run's data (a list of items, each with an id, the ids of the siblings it needs, and its
settings) and turns it into child nodes made from the binding's template. Everything
here is pure: the step builder asks :func:`read_plan` when the node enters the state,
commits the :class:`~phasegraph.model.Plan` it returns as one ``expand`` step (or fires
``refused`` with the reasons as feedback), and once every child has ended asks
:func:`joined` for the trigger the node fires (``done`` or ``failed``) and the results it
gathers. From the expansion on, each child is a node of the run like any other.

A revision (the node plans again after a child failed) keeps what finished: a child
that completed stays, with its result; a child that failed stays in the run's history
but no longer counts, and its id may not be used again; a child that never started
(skipped) may be planned again under its id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from phasegraph.actions import ActionResult
from phasegraph.core._graph import find_cycle
from phasegraph.model import (
    EMPTY,
    ActionDef,
    NodeDef,
    NodeOutcome,
    NodeStatus,
    Plan,
    PlanItem,
    RunState,
    child_id,
    frozen_map,
)

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "DONE",
    "FAILED",
    "REFUSED",
    "PlanBinding",
    "Refusal",
    "child_defs",
    "fresh_children",
    "joined",
    "plan_binding",
    "read_plan",
    "refusal_result",
]

DONE: Final = "done"
FAILED: Final = "failed"
REFUSED: Final = "refused"

_ITEM_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_SHOWN_PROBLEMS: Final = 20  # a refusal lists at most this many problems, then a count


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanBinding:
    """A ``plan:`` binding, compiled once when its graph is prepared.

    Attributes:
        hook: The hook it is bound to.
        source: The data key the plan is read from.
        items: The key of the plan that holds its list (``None``: the plan is the list).
        id_field: The item field naming each item (``None``: items are numbered).
        needs_field: The item field listing the siblings an item needs.
        called: What an item is called in messages (``item``, ``phase``, ...).
        schema: JSON Schema of an item's other fields (``None``: items carry none).
        max_items: The most items a plan may have.
        concurrency: A fixed limit of children running at once, if any.
        concurrency_key: The input or data key that holds the limit, if any.
        concurrency_default: The limit when that key is missing.
        result: The data key each child writes its result to, if any.
        into: The data key the node gathers its children's results into, if any.
        template: The node each item becomes.
    """

    hook: str
    source: str
    items: str | None
    id_field: str | None
    needs_field: str | None
    called: str
    schema: Mapping[str, Any] | None
    max_items: int
    concurrency: int | None
    concurrency_key: str | None
    concurrency_default: int
    result: str | None
    into: str | None
    template: NodeDef

    def validator(self) -> jsonschema.protocols.Validator | None:
        """A validator of an item's settings (``None`` when items carry none)."""
        if self.schema is None:
            return None
        from phasegraph.spec._input import input_validator  # only a plan with settings needs it

        return input_validator(self.schema)


def plan_binding(hook: str, action: ActionDef) -> PlanBinding:
    """Compile a ``plan:`` binding (its config was validated when the graph loaded)."""
    config: Mapping[str, Any] = action.config["plan"]
    template = action.template
    if template is None:  # the loader gives every plan binding its template
        raise ValueError(f"plan binding of hook {hook!r} has no template")
    concurrency = config.get("concurrency")
    limit = concurrency if isinstance(concurrency, int) else None
    key = concurrency.get("key") if isinstance(concurrency, Mapping) else None
    default = concurrency.get("default", 0) if isinstance(concurrency, Mapping) else 0
    schema = config.get("settings")
    return PlanBinding(
        hook=hook,
        source=str(config["from"]),
        items=config.get("items"),
        id_field=config.get("id"),
        needs_field=config.get("needs"),
        called=str(config.get("called", "item")),
        schema=None if schema is None else MappingProxyType(dict(schema)),
        max_items=int(config.get("max_items", 1000)),
        concurrency=limit,
        concurrency_key=None if key is None else str(key),
        concurrency_default=int(default),
        result=config.get("result"),
        into=config.get("into"),
        template=template,
    )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a plan was refused: one line per problem, each naming the item and the rule."""

    problems: tuple[str, ...]

    def message(self, source: str) -> str:
        """The refusal as one message (what the planner is given as feedback)."""
        shown = list(self.problems[:_SHOWN_PROBLEMS])
        more = len(self.problems) - len(shown)
        if more:
            shown.append(f"... and {more} more")
        head = f"the plan in data key {source!r} was refused"
        if len(shown) == 1:
            return f"{head}: {shown[0]}"
        return head + ":\n" + "\n".join(f"- {line}" for line in shown)


def refusal_result(binding: PlanBinding, refusal: Refusal) -> ActionResult:
    """The ``refused`` trigger a refused plan fires: the reasons are its feedback."""
    message = refusal.message(binding.source)
    # ``feedback`` for the planner, ``message`` for whoever reads why the node failed.
    payload = {"feedback": message, "message": message, "problems": list(refusal.problems)}
    return ActionResult(trigger=REFUSED, payload=frozen_map(payload))


class _Reader:
    """Reads one plan out of the run's data, collecting every problem it finds."""

    def __init__(self, binding: PlanBinding, state: RunState, parent: str) -> None:
        self.binding = binding
        self.state = state
        self.parent = parent
        self.problems: list[str] = []

    def refuse(self, text: str) -> None:
        self.problems.append(text)

    def raw_items(self) -> list[Any] | None:
        binding = self.binding
        if binding.source not in self.state.data:
            self.refuse(
                f"data key {binding.source!r} is not set: the step before node "
                f"{self.parent!r} must write the plan there"
            )
            return None
        raw = self.state.data[binding.source]
        where = f"data key {binding.source!r}"
        if binding.items is not None:
            if not isinstance(raw, Mapping) or binding.items not in raw:
                self.refuse(f"{where} holds no {binding.items!r}: write {{{binding.items}: [...]}}")
                return None
            raw, where = raw[binding.items], f"{where}, key {binding.items!r},"
        if not isinstance(raw, list | tuple):
            self.refuse(f"{where} holds {_kind(raw)}, not a list of items")
            return None
        if len(raw) > binding.max_items:
            self.refuse(
                f"it has {len(raw)} {binding.called}s, more than the {binding.max_items} node "
                f"{self.parent!r} allows (max_items): plan fewer, larger ones"
            )
            return None
        return list(raw)

    def item(self, index: int, value: Any) -> PlanItem | None:
        binding = self.binding
        id_field, needs_field = binding.id_field, binding.needs_field
        called = binding.called
        label = f"{called} {index}"
        if id_field is None and needs_field is None and binding.schema is None:
            return PlanItem(id=str(index), value=value)
        if not isinstance(value, Mapping):
            self.refuse(f"{label} is {_kind(value)}, not a mapping of fields")
            return None
        item_id = str(index)
        if id_field is not None:
            found = value.get(id_field)
            if not isinstance(found, str) or not _ITEM_ID.fullmatch(found):
                self.refuse(
                    f"{label} has no usable {id_field!r} ({found!r}): an id is letters, digits, "
                    "'_' and '-', starting with a letter or digit"
                )
                return None
            item_id, label = found, f"{called} {found!r}"
        needs = self._needs(label, value)
        settings = {k: v for k, v in value.items() if k not in (id_field, needs_field)}
        self._check_settings(label, settings)
        return PlanItem(id=item_id, needs=needs, value=frozen_map(value))

    def _needs(self, label: str, value: Mapping[str, Any]) -> tuple[str, ...]:
        field = self.binding.needs_field
        if field is None or value.get(field) is None:
            return ()
        listed = value[field]
        if not isinstance(listed, list | tuple) or not all(isinstance(n, str) for n in listed):
            self.refuse(f"{label}: {field!r} must be a list of item ids, not {listed!r}")
            return ()
        return tuple(dict.fromkeys(listed))

    def _check_settings(self, label: str, settings: Mapping[str, Any]) -> None:
        validator = self.binding.validator()
        if validator is None:
            for key in settings:
                self.refuse(
                    f"{label} has field {key!r}, which node {self.parent!r}'s template does "
                    "not accept (its plan declares no item settings)"
                )
            return
        errors = sorted(validator.iter_errors(dict(settings)), key=lambda e: list(e.path))
        for error in errors:
            if error.validator == "additionalProperties" and not error.path:
                self._unknown_fields(label, settings)
                continue
            place = ".".join(str(part) for part in error.path)
            self.refuse(f"{label}: {place + ': ' if place else ''}{error.message}")

    def _unknown_fields(self, label: str, settings: Mapping[str, Any]) -> None:
        schema = self.binding.schema or {}
        known = schema.get("properties") or {}
        accepted = ", ".join(sorted(map(str, known))) or "none"
        for key in settings:
            if key not in known:
                self.refuse(
                    f"{label} has field {key!r}, which node {self.parent!r}'s template does "
                    f"not accept (it accepts: {accepted})"
                )

    def limit(self) -> int:
        binding = self.binding
        if binding.concurrency is not None:
            return binding.concurrency
        key = binding.concurrency_key
        if key is None:
            return 0
        values = {**self.state.input, **self.state.data}
        value = values.get(key, binding.concurrency_default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.refuse(
                f"the limit of children running at once, {key!r}, is {value!r}: it must be a "
                "whole number >= 1"
            )
            return binding.concurrency_default
        return value


def read_plan(binding: PlanBinding, state: RunState, parent: str) -> Plan | Refusal:
    """Validate the plan ``parent`` reads now: its next :class:`Plan`, or why not.

    A first plan lists every child; a revision keeps the children that completed,
    replaces those that never started, and may not reuse the id of one that failed.

    Args:
        binding: The node's ``plan:`` binding.
        state: The run state (the plan is in its data).
        parent: The node whose plan it is.
    """
    reader = _Reader(binding, state, parent)
    raw = reader.raw_items()
    limit = reader.limit()
    if raw is None:
        return Refusal(tuple(reader.problems))
    listed = [item for index, value in enumerate(raw) if (item := reader.item(index, value))]
    previous = state.plans.get(parent)
    if reader.problems:
        return Refusal(tuple(reader.problems))
    problems = _order_problems(binding.called, listed, previous, state, parent)
    if problems:
        return Refusal(tuple(problems))
    return _next_plan(binding.hook, listed, previous, state, parent, limit)


def _order_problems(
    called: str, listed: Sequence[PlanItem], previous: Plan | None, state: RunState, parent: str
) -> list[str]:
    """Duplicate ids, needs on what is not there (or failed), and cycles."""
    problems: list[str] = []
    first: dict[str, int] = {}
    twice = False
    for position, item in enumerate(listed):
        if item.id in first:
            problems.append(
                f"{called}s {first[item.id]} and {position} are both {item.id!r}: give each "
                "its own id"
            )
            twice = True
        first.setdefault(item.id, position)
    done = _finished(previous, state, parent)
    for item in listed:
        outcome = done.get(item.id)
        if outcome is not None and outcome is not NodeOutcome.SUCCESS:
            version = previous.version if previous else 0
            problems.append(
                f"{called} {item.id!r} ended {outcome} in plan version {version}: "
                "give the new attempt another id"
            )
        for need in item.needs:
            problems += _need_problems(f"{called} {item.id!r}", item, need, first, done)
    if twice:
        return problems  # with an id twice, which item a dependency means is unclear
    cycle = find_cycle(
        [
            NodeDef(id=i.id, machine="", needs=tuple(n for n in i.needs if n in first))
            for i in listed
        ]
    )
    if cycle is not None:
        chain = " -> ".join(repr(step) for step in cycle)
        problems.append(f"{called}s {chain} form a cycle: remove one of these dependencies")
    return problems


def _need_problems(
    label: str,
    item: PlanItem,
    need: str,
    listed: Mapping[str, int],
    done: Mapping[str, NodeOutcome],
) -> list[str]:
    if need == item.id:
        return [f"{label} depends on itself: remove {need!r} from its dependencies"]
    if need in listed:
        return []
    outcome = done.get(need)
    if outcome is NodeOutcome.SUCCESS:
        return []  # a child that completed before this revision: its need is met
    if outcome is not None:
        return [
            f"{label} depends on {need!r}, which ended {outcome}: plan its retry and depend on that"
        ]
    from phasegraph.spec._suggest import did_you_mean  # only a mistake needs it

    return [
        f"{label} depends on {need!r}, which is not in the plan"
        f"{did_you_mean(need, [*listed, *done])}"
    ]


def _finished(previous: Plan | None, state: RunState, parent: str) -> dict[str, NodeOutcome]:
    """Item id → the outcome of each earlier child that ended by running (not skipped)."""
    if previous is None:
        return {}
    found: dict[str, NodeOutcome] = {}
    for item in previous.items:
        node = state.nodes.get(child_id(parent, item.id))
        if node is not None and node.status.terminal and node.outcome is not None:
            found[item.id] = node.outcome
        elif node is not None and node.status is NodeStatus.FAILED:
            found[item.id] = NodeOutcome.FAILED
    return found


def _next_plan(
    hook: str,
    listed: Sequence[PlanItem],
    previous: Plan | None,
    state: RunState,
    parent: str,
    limit: int,
) -> Plan:
    version = 1 if previous is None else previous.version + 1
    if previous is None:
        first = tuple(_versioned(item, version) for item in listed)
        return Plan(
            hook=hook, version=1, items=first, members=tuple(i.id for i in listed), limit=limit
        )
    done = _finished(previous, state, parent)
    kept = [m for m in previous.members if done.get(m) is NodeOutcome.SUCCESS]
    relisted = {item.id for item in listed}
    # Children that never ran are replaced by their new item; the rest keep theirs.
    new = {item.id: _versioned(item, version) for item in listed if item.id not in done}
    items = [new.pop(item.id) if item.id in new else item for item in previous.items]
    items += new.values()
    members = [m for m in kept if m not in relisted] + [item.id for item in listed]
    made = tuple(items)
    return Plan(hook=hook, version=version, items=made, members=tuple(members), limit=limit)


def _versioned(item: PlanItem, version: int) -> PlanItem:
    return PlanItem(id=item.id, needs=item.needs, value=item.value, version=version)


def fresh_children(plan: Plan, parent: str) -> list[str]:
    """The children an expansion starts afresh: new, or planned again after a skip."""
    return [child_id(parent, item.id) for item in plan.items if item.version == plan.version]


def child_defs(parent: NodeDef, binding: PlanBinding, plan: Plan) -> list[NodeDef]:
    """The node every item of ``plan`` becomes (superseded children included).

    A child needs its siblings as its item says, and what its parent needs (it runs
    within its parent, so it comes after everything the parent comes after).
    """
    template = binding.template
    base_settings = template.settings
    children = []
    for item in plan.items:
        value = item.value
        settings = base_settings
        if isinstance(value, Mapping):
            own = {
                k: v for k, v in value.items() if k not in (binding.id_field, binding.needs_field)
            }
            if own:
                settings = frozen_map({**base_settings, **own})
        children.append(
            NodeDef(
                id=child_id(parent.id, item.id),
                machine=template.machine,
                needs=(*(child_id(parent.id, n) for n in item.needs), *parent.needs),
                bind=template.bind,
                settings=settings,
                writes=template.writes,
                location=template.location,
                parent=parent.id,
                item=value,
            )
        )
    return children


def joined(binding: PlanBinding, plan: Plan, state: RunState, parent: str) -> ActionResult:
    """What a node fires once every current child has ended: ``done`` or ``failed``.

    ``failed`` carries which children failed (with why) and which were skipped, as the
    payload a replanner reads; with ``into``, the children's results are gathered in
    plan order.
    """
    nodes = state.nodes
    failed: list[str] = []
    skipped: list[str] = []
    reasons: list[str] = []
    for member in plan.members:
        node_id = child_id(parent, member)
        node = nodes[node_id]
        if node.status is NodeStatus.SKIPPED:
            skipped.append(member)
        elif not (node.status is NodeStatus.COMPLETED and node.outcome is NodeOutcome.SUCCESS):
            failed.append(member)
            reasons.append(f"{member!r} ({node.error or _logged(state, node_id) or node.status})")
    data: Mapping[str, Any] = EMPTY
    if binding.into is not None:
        gathered = [nodes[child_id(parent, member)].result for member in plan.members]
        data = frozen_map({binding.into: gathered})
    if not failed and not skipped:
        done = {"children": len(plan.members), "version": plan.version}
        return ActionResult(trigger=DONE, payload=frozen_map(done), data=data)
    message = f"{len(failed) + len(skipped)} of {len(plan.members)} children did not succeed"
    if reasons:
        message += ": failed " + "; ".join(reasons)
    if skipped:
        message += f"; skipped {', '.join(map(repr, skipped))}"
    payload: dict[str, Any] = {
        "failed": failed,
        "skipped": skipped,
        "message": message,
        "version": plan.version,
    }
    return ActionResult(trigger=FAILED, payload=frozen_map(payload), data=data)


def _logged(state: RunState, node_id: str) -> str | None:
    """The last error-log message of a node (why a node its machine failed ended so)."""
    return next((e.message for e in reversed(state.errors) if e.node == node_id), None)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {str: "text", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__
    )
