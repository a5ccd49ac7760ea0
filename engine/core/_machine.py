"""Compile machine definitions into shared ``transitions`` machines and step nodes on them.

Only this module imports ``transitions``. Each :class:`MachineDef` is compiled once into
a synchronous ``transitions.Machine``, the owner of the machine's semantics: it expands
the declared transitions into, per source state and trigger, the ordered candidate
transitions and their conditions. Firing a trigger reads that expansion back as a routing
table: the first candidate whose conditions all hold wins. The machine is configured with
no callbacks (no ``prepare``/``before``/``after``/``on_enter``/``on_exit``), so choosing
the first candidate whose conditions hold is everything the library's ``trigger`` would
do; skipping its per-call bookkeeping (event objects, logging, ``set_state``) is what makes
a step cheap. :meth:`CompiledMachine.fire_via_library` still fires through the library,
and a property test checks that both agree on every shipped machine. State truth lives in
:class:`~phasegraph.model.NodeState`, never in the library's model object, so one compiled
machine serves every node of a run.

Nested machines are run as a small stack of flat machines (a node's ``path``), so the
library's global nested-state separator is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, cast

from msgspec import Struct
from transitions import Machine, MachineError

from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError, Problem, SpecError
from phasegraph.model import (
    EMPTY,
    PATH_SEPARATOR,
    MachineDef,
    NodeOutcome,
    StateDef,
    Value,
)

__all__ = [
    "CompiledMachine",
    "MachineSet",
    "Position",
    "StepResult",
    "compile_machine",
    "compile_machines",
]


class _Guard(Struct, frozen=True, gc=False):
    """What guards may look at while one trigger fires (the condition callables' argument).

    A struct (built in C, positionally) rather than a named tuple, whose ``__new__`` is a
    Python function: one is built per step.
    """

    node_id: str
    counters: Mapping[str, int]
    limits: Mapping[str, int]
    payload: Mapping[str, Any]
    settings: Mapping[str, Any]
    prefix: str


Predicate = Callable[[_Guard], bool]


# A plain class, not a dataclass: defining a dataclass costs every run's start more
# (dataclasses writes and compiles its methods) than it saves here.
class _Route:
    """One candidate transition for a (source state, trigger), read from the library.

    Attributes:
        dest: The state it enters.
        checks: Each condition's callable and the value it must return (``True`` for
            ``conditions``, ``False`` for ``unless``), in the library's order.
    """

    __slots__ = ("alone", "checks", "dest", "final", "nested", "spends")

    def __init__(
        self,
        dest: str,
        checks: tuple[tuple[Predicate, bool], ...],
        nested: str | None,
        final: NodeOutcome | None,
        spends: tuple[str, ...],
        alone: tuple[str],
    ) -> None:
        self.dest: Final = dest
        self.checks: Final = checks
        # What a step needs of ``dest`` once the route is taken, read here once rather
        # than looked up per step: its nested machine, its outcome if final, the budgets
        # entering it spends, and the path ``(dest,)`` of a flat machine (one tuple, shared).
        self.nested: Final = nested
        self.final: Final = final
        self.spends: Final = spends
        self.alone: Final = alone


class _Cursor:
    """The library's model object, used only by :meth:`CompiledMachine.fire_via_library`.

    No ``__slots__``: ``transitions`` binds convenience methods onto its models.
    """

    def __init__(self) -> None:
        self.state = ""


def _setting(settings: Mapping[str, Any], dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _routes(
    machine: Machine, states: Mapping[str, StateDef], spent_on: Mapping[str, tuple[str, ...]]
) -> dict[tuple[str, str], tuple[_Route, ...]]:
    """The library's expansion of every trigger, keyed by (source state, trigger)."""

    def route(dest: str, checks: tuple[tuple[Predicate, bool], ...]) -> _Route:
        entered = states[dest]
        return _Route(dest, checks, entered.machine, entered.final, spent_on[dest], (dest,))

    return {
        (source, trigger): tuple(
            # Conditions are always our own callables, never names (see _transition_config).
            route(str(t.dest), tuple((cast(Predicate, c.func), c.target) for c in t.conditions))
            for t in candidates
        )
        for trigger, event in machine.events.items()
        for source, candidates in event.transitions.items()
        if candidates
    }


class CompiledMachine:
    """A machine definition compiled once into a ``transitions.Machine``.

    Attributes:
        definition: The definition it was compiled from.
    """

    def __init__(self, definition: MachineDef) -> None:
        self.definition = definition
        self._cursor = _Cursor()
        self._limits: dict[int, tuple[Mapping[str, Any], Mapping[str, int]]] = {}
        self._spent_on: dict[str, tuple[str, ...]] = {s: () for s in definition.states}
        for budget in definition.budgets.values():
            for state in budget.spend_on:
                self._spent_on[state] = (*self._spent_on[state], budget.name)
        # No callbacks of any kind: the routing table below relies on it (module docstring).
        self._machine = Machine(
            model=None,
            states=list(definition.states),
            initial=definition.initial,
            transitions=[self._transition_config(t) for t in definition.transitions],
            auto_transitions=False,
            ignore_invalid_triggers=False,
            send_event=False,
            queued=False,
        )
        self._machine.add_model(self._cursor, initial=definition.initial)
        self._routes = _routes(self._machine, definition.states, self._spent_on)
        self._legal = {
            state: tuple(sorted(self._machine.get_triggers(state))) for state in definition.states
        }
        self.retried = frozenset(s.retries for s in definition.states.values() if s.retries)
        """The states another state ``retries``: their calls' effect ids outlive them."""

    # -- compilation -------------------------------------------------------------------

    def _transition_config(self, transition: Any) -> dict[str, Any]:
        conditions = [self._predicate(name) for name in transition.conditions]
        # The engine's own guard: never enter a state whose budget is spent (once: a
        # transition that already asks ``budget:X`` needs no second check of it).
        conditions += [
            _budget_left(b)
            for b in self._spent_on.get(transition.dest, ())
            if f"budget:{b}" not in transition.conditions
        ]
        return {
            "trigger": transition.trigger,
            "source": list(transition.source),
            "dest": transition.dest,
            "conditions": conditions,
            "unless": [self._predicate(name) for name in transition.unless],
        }

    def _predicate(self, name: str) -> Predicate:
        family, _, argument = name.partition(":")
        if family == "budget":
            return _budget_left(argument)
        if family == "payload":
            return lambda guard: bool(guard.payload.get(argument))
        if family == "setting":
            return lambda guard: bool(_setting(guard.settings, argument))
        # The loader validates predicate names; reaching this means a hand-built definition.
        raise SpecError([Problem(f"machine {self.definition.name!r}: unknown predicate {name!r}")])

    # -- queries -----------------------------------------------------------------------

    def state(self, name: str) -> StateDef:
        """Return the definition of state ``name``."""
        return self.definition.states[name]

    def legal_triggers(self, state: str) -> tuple[str, ...]:
        """Triggers declared from ``state`` (before guards are evaluated)."""
        return self._legal[state]

    def spends(self, state: str) -> tuple[str, ...]:
        """Budgets spent by entering ``state``."""
        return self._spent_on[state]

    def limits(self, settings: Mapping[str, Any]) -> Mapping[str, int]:
        """Budget limits for a node: the machine's, overridden by ``with.budgets``."""
        # Settings are frozen per node, so the result is cached by identity; the cache
        # holds the settings object itself, so its id cannot be reused meanwhile.
        cached = self._limits.get(id(settings))
        if cached is not None and cached[0] is settings:
            return cached[1]
        overrides = settings.get("budgets", EMPTY)
        limits = MappingProxyType(
            {
                name: int(overrides.get(name, budget.limit))
                for name, budget in self.definition.budgets.items()
            }
        )
        self._limits[id(settings)] = (settings, limits)
        return limits

    # -- firing ------------------------------------------------------------------------

    def fire(self, state: str, trigger: str, guard: _Guard) -> str:
        """Fire ``trigger`` in ``state`` and return the destination state.

        Raises:
            IllegalTriggerError: The trigger is unknown, not declared from ``state``, or
                every transition it has from ``state`` was refused by its guards.
        """
        return self._route(state, trigger, guard).dest

    def _route(self, state: str, trigger: str, guard: _Guard) -> _Route:
        """The route :meth:`fire` takes (what :meth:`MachineSet.step` reads of it).

        Raises:
            IllegalTriggerError: As :meth:`fire`.
        """
        routes = self._routes.get((state, trigger))
        if routes is None:
            raise IllegalTriggerError(trigger, state, self._legal[state], node_id=guard.node_id)
        chosen = _first_open(routes, guard)
        if chosen < 0:
            raise self._refused(state, trigger, guard)
        return routes[chosen]

    def choose(
        self,
        state: str,
        trigger: str,
        *,
        counters: Mapping[str, int],
        limits: Mapping[str, int],
        payload: Mapping[str, Any] = EMPTY,
        settings: Mapping[str, Any] = EMPTY,
    ) -> tuple[int, str] | None:
        """Which candidate transition :meth:`fire` would take, without firing it.

        For analysis (``phasegraph check`` explores every guard value with it): the same
        routing table and guards as :meth:`fire`, at the outermost level (no prefix).

        Returns:
            The candidate's index among the transitions declared for ``trigger`` from
            ``state`` (declaration order) and its destination; ``None`` when every
            candidate is refused or ``trigger`` is not declared from ``state``.
        """
        routes = self._routes.get((state, trigger))
        if routes is None:
            return None
        guard = _Guard("", counters, limits, payload, settings, "")
        chosen = _first_open(routes, guard)
        return None if chosen < 0 else (chosen, routes[chosen].dest)

    def fire_via_library(self, state: str, trigger: str, guard: _Guard) -> str:
        """Like :meth:`fire`, but through ``transitions``' own ``trigger`` (slow).

        The reference :meth:`fire` must agree with; it is not used on the step path.

        Raises:
            IllegalTriggerError: As :meth:`fire`.
        """
        event = self._machine.events.get(trigger)
        if event is None:
            raise IllegalTriggerError(trigger, state, self._legal[state], node_id=guard.node_id)
        self._machine.set_state(state, model=self._cursor)
        try:
            moved = event.trigger(self._cursor, guard)
        except MachineError:
            raise IllegalTriggerError(
                trigger, state, self._legal[state], node_id=guard.node_id
            ) from None
        if not moved:
            raise self._refused(state, trigger, guard)
        return str(self._cursor.state)

    def _refused(self, state: str, trigger: str, guard: _Guard) -> IllegalTriggerError:
        return IllegalTriggerError(
            trigger,
            state,
            self._legal[state],
            reason="was refused by every guard (a condition failed or a budget is spent)",
            node_id=guard.node_id,
        )


def _first_open(routes: tuple[_Route, ...], guard: _Guard) -> int:
    """Index of the first route whose checks all hold, or -1."""
    for index, route in enumerate(routes):
        # transitions' Condition.check: the callable's result must equal the target.
        for check, wanted in route.checks:
            if check(guard) != wanted:
                break
        else:
            return index
    return -1


def _budget_left(budget: str) -> Predicate:
    return lambda guard: guard.counters.get(guard.prefix + budget, 0) < guard.limits[budget]


class Position(Value, frozen=True, kw_only=True):
    """Where a node stands: its state path and spent budgets.

    Attributes:
        path: State names, outermost machine first.
        counters: Spent units per budget; nested levels are prefixed ``parent/``.
    """

    path: tuple[str, ...]
    counters: Mapping[str, int]


class StepResult(Value, frozen=True, kw_only=True):
    """The position after a step, and the outcome if the node finished."""

    position: Position
    outcome: NodeOutcome | None


class MachineSet:
    """Every compiled machine a graph uses, and the hierarchical stepping over them."""

    def __init__(self, machines: Mapping[str, CompiledMachine]) -> None:
        self._machines = MappingProxyType(dict(machines))
        # (root, path) → levels and hook; at most one entry per state path a node can reach.
        self._levels: dict[tuple[str, tuple[str, ...]], tuple[CompiledMachine, ...]] = {}
        self._hooks: dict[tuple[str, tuple[str, ...]], str | None] = {}

    def __getitem__(self, name: str) -> CompiledMachine:
        return self._machines[name]

    def levels(self, root: str, path: tuple[str, ...]) -> tuple[CompiledMachine, ...]:
        """The compiled machine at each level of ``path``."""
        levels = self._levels.get((root, path))
        if levels is None:
            machines = [self._machines[root]]
            for state in path[:-1]:
                nested = machines[-1].state(state).machine
                if nested is None:
                    break
                machines.append(self._machines[nested])
            levels = self._levels[(root, path)] = tuple(machines)
        return levels

    def hook(self, root: str, path: tuple[str, ...]) -> str | None:
        """The hook of the innermost state of ``path``."""
        key = (root, path)
        if key not in self._hooks:
            self._hooks[key] = self.levels(root, path)[-1].state(path[-1]).hook
        return self._hooks[key]

    def retries(self, root: str, path: tuple[str, ...]) -> str | None:
        """The state whose call the innermost state of ``path`` makes again, if any."""
        return self.levels(root, path)[-1].state(path[-1]).retries if path else None

    def retried(self, root: str, path: tuple[str, ...]) -> bool:
        """Whether another state retries the call of the innermost state of ``path``."""
        return bool(path) and path[-1] in self.levels(root, path)[-1].retried

    def legal_triggers(self, root: str, path: tuple[str, ...]) -> tuple[str, ...]:
        """Triggers declared from the innermost state of ``path``."""
        return self.levels(root, path)[-1].legal_triggers(path[-1])

    def start(self, root: str, node_id: str, settings: Mapping[str, Any]) -> StepResult:
        """Enter the root machine's initial state (descending into nested machines).

        Raises:
            BudgetExhaustedError: Entering the initial state would exceed a budget.
        """
        machine = self._machines[root]
        ctx = _StepContext(node_id=node_id, settings=settings, counters={})
        return self._enter((machine,), (), "", machine.definition.initial, ctx)

    def step(
        self,
        root: str,
        position: Position,
        trigger: str,
        *,
        node_id: str,
        settings: Mapping[str, Any],
        payload: Mapping[str, Any] = EMPTY,
    ) -> StepResult:
        """Fire ``trigger`` at the innermost level; unwind nested machines that finish.

        Raises:
            IllegalTriggerError: The trigger is not legal in the innermost state.
            BudgetExhaustedError: The destination would exceed a budget.
        """
        path = position.path
        machines = self.levels(root, path)
        if len(path) == 1:  # a flat machine (or the outermost level): the usual step
            machine = machines[0]
            limits = machine.limits(settings)
            counters = position.counters
            guard = _Guard(node_id, counters, limits, payload, settings, "")
            route = machine._route(path[0], trigger, guard)
            if route.nested is None:  # no nested machine to descend into
                spends = route.spends
                if spends:
                    counters = _spent(dict(counters), "", spends, limits, node_id, route.dest)
                elif type(counters) is not MappingProxyType:
                    counters = MappingProxyType(dict(counters))
                position = Position(path=route.alone, counters=counters)
                return StepResult(position=position, outcome=route.final)
            # Fired already: descend into the nested machine without firing again.
            ctx = _StepContext(node_id=node_id, settings=settings, counters=dict(counters))
            return self._enter(machines, (), "", route.dest, ctx)
        ctx = _StepContext(node_id=node_id, settings=settings, counters=dict(position.counters))
        return self._fire_at(machines, path, trigger, payload, ctx)

    def _fire_at(
        self,
        machines: tuple[CompiledMachine, ...],
        path: tuple[str, ...],
        trigger: str,
        payload: Mapping[str, Any],
        ctx: _StepContext,
    ) -> StepResult:
        machine = machines[-1]
        parents = path[:-1]
        prefix = _prefix(parents)
        limits = machine.limits(ctx.settings)
        guard = _Guard(ctx.node_id, ctx.counters, limits, payload, ctx.settings, prefix)
        dest = machine.fire(path[-1], trigger, guard)
        return self._enter(machines, parents, prefix, dest, ctx)

    def _enter(
        self,
        machines: tuple[CompiledMachine, ...],
        parents: tuple[str, ...],
        prefix: str,
        state: str,
        ctx: _StepContext,
    ) -> StepResult:
        """Enter ``state`` of ``machines[-1]``, whose parent states are ``parents``.

        ``prefix`` is ``_prefix(parents)``: the key prefix of this level's budgets.
        """
        machine = machines[-1]
        _spend(machine, prefix, state, ctx)
        path = (*parents, state)
        definition = machine.state(state)
        if definition.machine is not None:
            child = self._machines[definition.machine]
            # A nested machine starts afresh (with fresh budgets) each time it is entered.
            child_prefix = _prefix(path)
            for key in [k for k in ctx.counters if k.startswith(child_prefix)]:
                del ctx.counters[key]
            initial = child.definition.initial
            return self._enter((*machines, child), path, child_prefix, initial, ctx)
        if definition.final is not None and parents:
            # The child finished: its outcome is the trigger its parent state receives.
            return self._fire_at(machines[:-1], parents, str(definition.final), EMPTY, ctx)
        position = Position(path=path, counters=MappingProxyType(ctx.counters))
        return StepResult(position=position, outcome=definition.final)


class _StepContext:  # a plain class: see _Route
    __slots__ = ("counters", "node_id", "settings")

    def __init__(
        self, *, node_id: str, settings: Mapping[str, Any], counters: dict[str, int]
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self.counters = counters


def _spend(machine: CompiledMachine, prefix: str, state: str, ctx: _StepContext) -> None:
    spends = machine.spends(state)
    if spends:
        limits = machine.limits(ctx.settings)
        _spent(ctx.counters, prefix, spends, limits, ctx.node_id, state)


def _spent(
    counters: dict[str, int],
    prefix: str,
    spends: tuple[str, ...],
    limits: Mapping[str, int],
    node_id: str,
    state: str,
) -> Mapping[str, int]:
    """Spend one unit of each of ``spends`` in ``counters``; return them read-only.

    Raises:
        BudgetExhaustedError: A budget is spent already.
    """
    for budget in spends:
        key = prefix + budget
        spent = counters.get(key, 0)
        if spent >= limits[budget]:
            raise BudgetExhaustedError(
                f"node {node_id!r}: entering {state!r} would exceed budget {budget!r} "
                f"(limit {limits[budget]})",
                node_id=node_id,
            )
        counters[key] = spent + 1
    return MappingProxyType(counters)


def _prefix(parents: tuple[str, ...]) -> str:
    if not parents:
        return ""  # the usual, flat case
    return "".join(p + PATH_SEPARATOR for p in parents)


def compile_machine(definition: MachineDef) -> CompiledMachine:
    """Compile one machine definition."""
    return CompiledMachine(definition)


def compile_machines(definitions: Mapping[str, MachineDef]) -> MachineSet:
    """Compile every machine of a graph once."""
    return MachineSet({name: CompiledMachine(d) for name, d in definitions.items()})
