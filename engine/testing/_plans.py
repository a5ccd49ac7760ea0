"""Plans explored: each plan of a graph, made of 0, 1 and many items, with and without needs.

A plan is known only when a run makes it, so ``phasegraph test`` makes some up. For each
``plan:`` binding of a graph's nodes it runs the graph on a memory store with scripted
actions instead of the real ones: the nodes before it and the node that plans head for
the plan by the shortest way their machines allow, writing a made-up plan of each shape
(no item; one; four independent ones; four in a chain; four in a diamond — a map has no
needs, so only the first three); the children answer from a few fixed scripts
(:mod:`phasegraph.testing._outcomes`), so some succeed and some fail. Whatever the plan,
these must hold, and are checked on every run:

* the plan is committed in one step, before any child starts;
* a child starts only once every sibling it needs has succeeded, and one whose need
  failed is skipped;
* no more children run at once than the plan allows;
* the node that planned ends ``done`` exactly when every child succeeded;
* the run ends within what the budgets allow, a replay reproduces it step for step, and
  a run stopped after every step and resumed from its snapshot ends the same.

An item's fields are made from the plan's ``settings`` schema: its required fields, with
the smallest values the schema accepts.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from phasegraph.actions import Action, ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.core._machine import MachineSet, compile_machines
from phasegraph.core._plans import plan_bindings, template_label
from phasegraph.model import (
    PATH_SEPARATOR,
    GraphDef,
    MachineDef,
    NodeDef,
    NodeOutcome,
    NodeStatus,
    RunState,
    StepRecord,
    child_id,
    replace,
)
from phasegraph.run import RunOptions, prepare
from phasegraph.store.memory import MemoryStore
from phasegraph.testing._outcomes import Outcome, _Scripted
from phasegraph.testing._runs import PropertyFailed, _FixedClock

__all__ = ["PlanShape", "explore_plans", "plan_shapes"]

_RUN_ID: Final = "plan-property-run"
_CHILD_SCRIPTS: Final = ((0,), (1,), (2, 0), (0, 1, 2))  # trigger choices of children's steps
_STEP_CAP: Final = 2000  # no run of four made-up children takes this many steps


@dataclass(frozen=True, slots=True)
class PlanShape:
    """A made-up plan: its name in messages, and each item's id and the ids it needs."""

    name: str
    items: tuple[tuple[str, tuple[str, ...]], ...]


def plan_shapes(with_needs: bool) -> list[PlanShape]:
    """The shapes tried: 0, 1 and 4 items; with needs, a chain and a diamond too."""
    shapes = [
        PlanShape("no item", ()),
        PlanShape("one item", (("p0", ()),)),
        PlanShape("four independent items", tuple((f"p{i}", ()) for i in range(4))),
    ]
    if with_needs:
        chain = tuple((f"p{i}", (f"p{i - 1}",) if i else ()) for i in range(4))
        diamond = (("p0", ()), ("p1", ("p0",)), ("p2", ("p0",)), ("p3", ("p1", "p2")))
        shapes += [PlanShape("four items in a chain", chain), PlanShape("a diamond", diamond)]
    return shapes


def example_value(schema: Any) -> Any:
    """The smallest value ``schema`` (a JSON Schema, as plans use them) accepts."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example_value(schema[key][0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    make = _EXAMPLES.get(str(kind))
    return None if make is None else make(schema)


def _object(schema: Mapping[str, Any]) -> Any:
    properties = schema.get("properties") or {}
    return {name: example_value(properties.get(name)) for name in schema.get("required", ())}


_EXAMPLES: Final[Mapping[str, Callable[[Mapping[str, Any]], Any]]] = {
    "object": _object,
    "array": lambda s: [example_value(s.get("items"))] * max(int(s.get("minItems", 0)), 1),
    "string": lambda s: "x" * max(int(s.get("minLength", 1)), 1),
    "integer": lambda s: s.get("minimum", 1),
    "number": lambda s: s.get("minimum", 1),
    "boolean": lambda s: True,
}
"""JSON Schema type → the smallest value of it (its ``minItems``, ``minLength``, ``minimum``)."""


def _items(shape: PlanShape, config: Mapping[str, Any]) -> Any:
    """The shape as the data a planner would write for this binding."""
    id_field, needs_field = config.get("id"), config.get("needs")
    settings = example_value(config["settings"]) if config.get("settings") else {}
    items: list[Any] = []
    for item_id, needs in shape.items:
        if id_field is None and needs_field is None and not settings:
            items.append(item_id)
            continue
        item = dict(settings or {})
        if id_field is not None:
            item[id_field] = item_id
        if needs_field is not None:
            item[needs_field] = list(needs)
        items.append(item)
    return {config["items"]: items} if config.get("items") else items


class _Toward:
    """A scripted action that heads for some states of its machine by the shortest way.

    Guards are not known here: each trigger is judged by where its first transition
    from the current state leads, ignoring conditions (a budget or guard may send the
    node elsewhere, and the run still ends: every loop spends a budget).
    """

    def __init__(
        self,
        machines: MachineSet,
        node: NodeDef,
        definition: MachineDef,
        goals: set[str],
        data: Mapping[str, Any],
    ) -> None:
        self._machines, self._node, self._data = machines, node, data
        self._distance = _distances(definition, goals)
        self._definition = definition

    async def __call__(self, ctx: ActionContext) -> ActionResult:
        path = tuple(ctx.state.split(PATH_SEPARATOR))
        legal = _Scripted(self._machines, self._node, ((Outcome(0),))).legal(path)
        state = path[-1]
        far = len(self._distance) + 1

        def distance(trigger: str) -> int:
            for transition in self._definition.transitions:
                if transition.trigger == trigger and state in transition.source:
                    return self._distance.get(transition.dest, far)
            return far

        trigger = min(sorted(legal), key=distance)
        return ActionResult(trigger=trigger, data=self._data)


def _distances(machine: MachineDef, goals: set[str]) -> dict[str, int]:
    """Each state's fewest transitions to one of ``goals`` (guards ignored)."""
    distance = {goal: 0 for goal in goals}
    queue = deque(goals)
    while queue:
        state = queue.popleft()
        for transition in machine.transitions:
            if transition.dest != state:
                continue
            for source in transition.source:
                if source not in distance:
                    distance[source] = distance[state] + 1
                    queue.append(source)
    return distance


class _Children:
    """The scripted action of a plan's children: each child answers from one of a few scripts."""

    def __init__(self, machines: MachineSet, template: NodeDef) -> None:
        self._actions = [
            _Scripted(machines, template, tuple(Outcome(c) for c in choices))
            for choices in _CHILD_SCRIPTS
        ]

    async def __call__(self, ctx: ActionContext) -> ActionResult:
        index = sum(map(ord, ctx.node_id)) % len(self._actions)  # the same child, the same script
        return await self._actions[index](ctx)


def _hooks(machines: Mapping[str, MachineDef], node: NodeDef) -> set[str]:
    """The hooks of a node's machine that run an action (its plans' hooks are the engine's)."""
    machine = machines[node.machine]
    planned = {hook for hook, _, _ in plan_bindings(node)}
    return {state.hook for state in machine.states.values() if state.hook} - planned


def _actions(
    definition: GraphDef, owner: NodeDef, hook: str, template: NodeDef, plan: Any, source: str
) -> dict[tuple[str, str], Action]:
    """Scripted actions: heading for the plan (or success), and children's scripts."""
    machines = definition.machines
    compiled = compile_machines(machines)
    actions: dict[tuple[str, str], Action] = {}
    for node in definition.nodes:
        machine = machines[node.machine]
        if node.id == owner.id:
            goals = {s.name for s in machine.states.values() if s.hook == hook}
            action: Action = _Toward(compiled, node, machine, goals, {source: plan})
        else:
            goals = {s.name for s in machine.states.values() if s.final is NodeOutcome.SUCCESS}
            action = _Toward(compiled, node, machine, goals, {})
        actions.update({(node.id, h): action for h in _hooks(machines, node)})
    children = _Children(compiled, template)
    label = template_label(owner.id)
    actions.update({(label, h): children for h in _hooks(machines, template)})
    return actions


async def _drive(engine: Engine, prepared: Any) -> list[StepRecord]:
    records: list[StepRecord] = []
    async with engine.start(prepared, {}, run_id=_RUN_ID) as run:
        while len(records) < _STEP_CAP:
            record = await run.next()
            if record is None:
                return records
            records.append(record)
    raise PropertyFailed(f"the run did not end within {_STEP_CAP} steps")


async def _stopped_at_every_step(engine: Engine, prepared: Any) -> RunState:
    async with engine.start(prepared, {}, run_id=_RUN_ID):
        pass
    for _ in range(_STEP_CAP):
        async with engine.open(_RUN_ID, graph=prepared) as run:
            if await run.next() is None:
                return run.state
    raise PropertyFailed(f"the stopped and resumed run did not end within {_STEP_CAP} steps")


def _check(records: Sequence[StepRecord], owner: str, shape: PlanShape) -> None:
    """The rules every run of a plan keeps, read off its committed steps."""
    expanded = next((r for r in records if r.kind == "expand" and r.node == owner), None)
    if expanded is None:
        return  # the node never reached its plan (its machine went another way)
    prefix = owner + "."
    started = [r for r in records if r.kind == "start" and (r.node or "").startswith(prefix)]
    if started and started[0].seq < expanded.seq:
        raise PropertyFailed(f"child {started[0].node!r} started before the plan was committed")
    if expanded.plan is None or len(expanded.plan.members) != len(shape.items):
        raise PropertyFailed(f"the plan committed at step {expanded.seq} lost items")
    _check_running(records, owner, expanded.plan.limit)
    _check_order(records, owner)


def _check_running(records: Sequence[StepRecord], owner: str, limit: int) -> None:
    running: set[str] = set()
    prefix = owner + "."
    for record in records:
        for node_id, node in record.nodes.items():
            if not node_id.startswith(prefix):
                continue
            if node.status is NodeStatus.RUNNING:
                running.add(node_id)
            else:
                running.discard(node_id)
        if limit and len(running) > limit:
            raise PropertyFailed(
                f"step {record.seq}: {len(running)} children of {owner!r} were running, more "
                f"than the plan's limit of {limit}"
            )


def _check_order(records: Sequence[StepRecord], owner: str) -> None:
    """Children start after their needs succeeded; the node joins as its children ended."""
    needs: dict[str, tuple[str, ...]] = {}
    members: tuple[str, ...] = ()
    succeeded: set[str] = set()
    for record in records:
        if record.kind == "expand" and record.node == owner and record.plan is not None:
            members = tuple(child_id(owner, m) for m in record.plan.members)
            needs = {
                child_id(owner, i.id): tuple(child_id(owner, n) for n in i.needs)
                for i in record.plan.items
            }
        if record.kind == "start" and record.node in needs:
            missing = [need for need in needs[record.node] if need not in succeeded]
            if missing:
                raise PropertyFailed(
                    f"child {record.node!r} started at step {record.seq} before {missing} succeeded"
                )
        for node_id, node in record.nodes.items():
            if node.status is NodeStatus.COMPLETED and node.outcome is NodeOutcome.SUCCESS:
                succeeded.add(node_id)
        if record.kind == "join" and record.node == owner:
            every = all(member in succeeded for member in members)
            if (record.trigger == "done") != every:
                raise PropertyFailed(
                    f"node {owner!r} fired {record.trigger!r} at step {record.seq}, but "
                    f"{'every' if every else 'not every'} child succeeded"
                )


async def _one(definition: GraphDef, owner: NodeDef, hook: str, shape: PlanShape) -> None:
    action = owner.bind[hook]
    template = action.template
    if template is None:
        return
    config: Mapping[str, Any] = action.config["plan"]
    plan = _items(shape, config)
    scripted = _actions(definition, owner, hook, template, plan, str(config["from"]))
    prepared = prepare(definition, definition.name, scripted)
    options = RunOptions(owner="phasegraph.testing._plans")
    async with MemoryStore() as store:
        engine = Engine(store, options=options, clock=_FixedClock())
        records = await _drive(engine, prepared)
        _check(records, owner.id, shape)
        straight = await engine.get(_RUN_ID)
        if not straight.status.terminal and not straight.interrupts:
            raise PropertyFailed(
                f"the run stopped {straight.status} at step {straight.seq} with nothing to wait for"
            )
        report = await engine.replay(_RUN_ID, graph=prepared)
        if report.divergence is not None:
            raise PropertyFailed(
                f"the replay differs at step {report.divergence.seq}: {report.divergence.reason}"
            )
    async with MemoryStore() as store:
        engine = Engine(store, options=options, clock=_FixedClock())
        resumed = await _stopped_at_every_step(engine, prepared)
    if {k: (v.status, v.path) for k, v in straight.nodes.items()} != {
        k: (v.status, v.path) for k, v in resumed.nodes.items()
    } or straight.status is not resumed.status:
        raise PropertyFailed("a run stopped after every step and resumed ended differently")


def _bindings(definition: GraphDef) -> Iterable[tuple[NodeDef, str, Mapping[str, Any]]]:
    for node in definition.nodes:
        for hook, action, _ in plan_bindings(node):
            yield node, hook, action.config["plan"]


def explore_plans(definition: GraphDef) -> tuple[int, list[str]]:
    """Run every plan of the graph's nodes in every shape; (runs, failures).

    The graph should pass ``phasegraph check``; its own actions never run.
    """
    ready = _uncapped(definition)
    runs, failures = 0, []
    for owner, hook, config in _bindings(ready):
        for shape in plan_shapes(config.get("needs") is not None and config.get("id") is not None):
            runs += 1
            try:
                _apart(_one(ready, owner, hook, shape))
            except PropertyFailed as exc:
                failures.append(f"node {owner.id!r}, a plan of {shape.name}: {exc}")
    return runs, failures


def _apart(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` on an event loop of its own (the caller may be inside one: the CLI)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="phasegraph-plans") as pool:
        pool.submit(asyncio.run, work).result()


def _uncapped(definition: GraphDef) -> GraphDef:
    """The graph as property runs take it: no middleware, no input schema."""
    return replace(definition, middleware=(), input_schema=None)
