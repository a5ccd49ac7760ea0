"""Exhaustive exploration of a machine: every state x budget counter x guard value.

A *configuration* of one machine level is its state and the units spent of each of its
budgets. From a configuration, an action may return any trigger its state accepts (or,
for a graph node, any its binding declares, ``error`` included), with any truth values
for the ``payload:`` predicates that trigger's transitions read; a nesting state is left
on each outcome its nested machine can end with. Each move is decided by the engine's
own routing table and guards (:meth:`phasegraph.core.CompiledMachine.choose`), and
entering a state spends the budgets listed for it, exactly as a run does. A budget no
state spends (``spend_on: []``) is spent by actions (an ``llm:`` action's tokens): any
action's result may leave it spent, so each move is also tried with it spent. The
exploration is breadth-first, so the trace kept to every configuration is a shortest one.

Budgets are counted symbolically, except that a graph node's exploration (its own
limits) counts them unit by unit while that keeps the space small (:data:`EXACT_SPACE`),
smallest limits first. A guard only
ever asks whether a budget has units left, and a counter only grows (one unit per
entry, or straight to the limit when an action spends it), so what a counter decides
depends only on how many units are left when few are. Above a window of :func:`window`
units left a symbolic counter is one value, "more than the window left"; spending a
unit from it leaves it there or brings it to exactly the window left. A node with
``steps: 1000000`` is thus explored in as many configurations as one with ``steps: 5``
(7), and what the exploration finds holds for some limits above the window, each
budget's on its own: which state a long loop runs out in is found, at any limit, but
not which one a particular large limit runs out in, nor which of two large budgets
runs out first.

A nested machine starts afresh (fresh budgets) each time it is entered and reads only
its own counters, so levels are explored one machine at a time: a nesting state's moves
are the outcomes its child can reach under the same assumptions.

What one exploration assumes is an :class:`Assumption`: the node's ``with`` settings
(which decide ``setting:`` predicates and budget limits). A graph node has exactly one;
a machine on its own is explored under every consistent truth assignment of its
``setting:`` predicates and, per budget, the limits 1, 2 and the declared one (a node may
override limits), so a transition reported dead is dead however the machine is used.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from phasegraph.core._machine import CompiledMachine
from phasegraph.model import MachineDef, TransitionDef

__all__ = [
    "EXACT_SPACE",
    "MAX_CONFIGURATIONS",
    "Assumption",
    "Config",
    "Explorer",
    "Gap",
    "Space",
    "assumptions",
    "fireable",
    "format_trace",
    "payload_keys",
    "setting_keys",
    "window",
]

MAX_CONFIGURATIONS = 200_000
"""Configurations explored per machine (over all its assumptions) before exploration
stops, so ``check`` ends on any definition: 200,000 take some 6 seconds of CPU.
Budgets are symbolic (see the module docstring), so only a machine with many budgets,
payload keys or states comes near it; one that does is reported as incomplete."""

EXACT_SPACE = 1024
"""For a graph node: states x counts of the budgets counted unit by unit, at most (the
rest are symbolic). A machine on its own stands for any limits: it is all symbolic."""

_MAX_ASSUMPTIONS = 64
"""Above this many limit x setting combinations only a few representative ones are used."""


@dataclass(frozen=True, slots=True, order=True)
class Config:
    """A state of one machine level and the units spent per budget (declaration order)."""

    state: str
    spent: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Assumption:
    """What one exploration assumes about the node: its settings, and how to say so.

    Attributes:
        settings: The node's ``with`` settings (budget overrides included).
        label: The assumption in words (empty when it is the machine's defaults).
        rank: How many budget limits differ from the declared ones (findings prefer the
            assumption closest to the defaults).
    """

    settings: Mapping[str, Any]
    label: str = ""
    rank: int = 0


@dataclass(frozen=True, slots=True)
class Gap:
    """A move every guard refuses: the node fails there.

    Attributes:
        config: Where it happens (reached by the shortest trace).
        trigger: The trigger returned.
        payload: The ``payload:`` values sent with it (keys the transitions read).
        spent: Budgets whose limit is reached in ``config``.
    """

    config: Config
    trigger: str
    payload: tuple[tuple[str, bool], ...]
    spent: tuple[str, ...]


@dataclass(slots=True)
class Space:
    """Everything one exploration of one machine under one assumption found.

    Attributes:
        machine: The machine explored.
        assumption: What was assumed.
        parent: Configuration → the configuration and move label it was first reached by
            (``None`` for the initial one): shortest traces.
        edges: Configuration → the configurations one move leads to.
        fired: ``(transition index, source state)`` of every transition taken.
        gaps: ``(state, trigger)`` → the first refused move found (a shortest one).
        outcomes: Outcome → the first final configuration reached with it.
        spending: Moves ``(from, to)`` that spend a budget; with symbolic budgets such a
            move may lead back to the same configuration, but it cannot repeat for ever.
        truncated: The exploration stopped at :data:`MAX_CONFIGURATIONS`.
        start_refused: Entering the initial state would already exceed a budget.
    """

    machine: MachineDef
    assumption: Assumption
    parent: dict[Config, tuple[Config, str] | None] = field(default_factory=dict)
    edges: dict[Config, list[Config]] = field(default_factory=dict)
    fired: set[tuple[int, str]] = field(default_factory=set)
    gaps: dict[tuple[str, str], Gap] = field(default_factory=dict)
    outcomes: dict[str, Config] = field(default_factory=dict)
    spending: set[tuple[Config, Config]] = field(default_factory=set)
    truncated: bool = False
    start_refused: bool = False

    def trace(self, config: Config) -> list[tuple[str, str]]:
        """The moves from the initial configuration to ``config``: ``(label, state)``."""
        moves: list[tuple[str, str]] = []
        current: Config | None = config
        while current is not None:
            step = self.parent.get(current)
            if step is None:
                moves.append(("", current.state))
                break
            moves.append((step[1], current.state))
            current = step[0]
        return list(reversed(moves))

    def trace_text(self, config: Config, prefix: str = "") -> str:
        """The shortest trace to ``config`` as text, repeated moves folded."""
        return format_trace(self.trace(config), prefix)

    def live(self) -> set[Config]:
        """Configurations from which some final configuration can still be reached."""
        return self.reaching(
            c for c in self.parent if self.machine.states[c.state].final is not None
        )

    def reaching(self, targets: Iterable[Config]) -> set[Config]:
        """Configurations from which one of ``targets`` can be reached (targets included)."""
        backwards: dict[Config, list[Config]] = {}
        for source, dests in self.edges.items():
            for dest in dests:
                backwards.setdefault(dest, []).append(source)
        seen = set(targets)
        queue = deque(seen)
        while queue:
            for source in backwards.get(queue.popleft(), ()):
                if source not in seen:
                    seen.add(source)
                    queue.append(source)
        return seen

    def cycle(self) -> list[Config] | None:
        """A reachable cycle of configurations (a loop no budget bounds), if any.

        Moves that spend a budget are not followed: a loop through one is bounded.
        Returned from its first configuration back to it, found in breadth-first order
        so the way into it is short.
        """
        colour: dict[Config, int] = {}
        for root in self.parent:
            if root in colour:
                continue
            stack: list[tuple[Config, Iterator[Config]]] = [(root, self._steady(root))]
            colour[root] = 1
            path = [root]
            while stack:
                node, children = stack[-1]
                child = next(children, None)
                if child is None:
                    colour[node] = 2
                    stack.pop()
                    path.pop()
                elif colour.get(child, 0) == 1:
                    return [*path[path.index(child) :], child]
                elif child not in colour:
                    colour[child] = 1
                    path.append(child)
                    stack.append((child, self._steady(child)))
        return None

    def _steady(self, config: Config) -> Iterator[Config]:
        """The configurations one move that spends nothing leads to."""
        return (d for d in self.edges.get(config, ()) if (config, d) not in self.spending)


def format_trace(moves: Iterable[tuple[str, str]], prefix: str = "") -> str:
    """``a --t--> b --t--> b`` with runs of one repeated move folded (``(--t--> b) x5``)."""
    parts: list[str] = []
    previous: tuple[str, str] | None = None
    count = 0

    def flush() -> None:
        if previous is None or count == 0:
            return
        text = f"--{previous[0]}--> {prefix}{previous[1]}"
        parts.append(text if count == 1 else f"({text}) x{count}")

    for label, state in moves:
        if not label:
            parts.append(prefix + state)
            continue
        if (label, state) == previous:
            count += 1
            continue
        flush()
        previous, count = (label, state), 1
    flush()
    return " ".join(parts)


# --------------------------------------------------------------------------- settings


def setting_keys(machines: Iterable[MachineDef]) -> list[str]:
    """Every dotted setting the ``setting:`` predicates of ``machines`` read, sorted."""
    return sorted(
        {
            predicate.partition(":")[2]
            for machine in machines
            for transition in machine.transitions
            for predicate in (*transition.conditions, *transition.unless)
            if predicate.startswith("setting:")
        }
    )


def _settings_for(truth: Mapping[str, bool]) -> dict[str, Any] | None:
    """Settings under which each dotted key has the given truth, or None if impossible."""
    settings: dict[str, Any] = {}
    for key in sorted(truth, key=lambda k: k.count(".")):
        if truth[key]:
            _place(settings, key, truth)
    # Keep only constructions that read back as asked (a true `a.b` under a false `a`
    # cannot be built); reading is the engine's own rule (`_read`).
    if any(bool(_read(settings, key)) != value for key, value in truth.items()):
        return None
    return settings


def _place(settings: dict[str, Any], key: str, truth: Mapping[str, bool]) -> None:
    """Make ``key`` true: a mapping when other keys read below it, else ``True``."""
    parts = key.split(".")
    level = settings
    for part in parts[:-1]:
        nested = level.get(part)
        if not isinstance(nested, dict):
            nested = level[part] = {}
        level = nested
    below = [k[len(key) + 1 :].split(".")[0] for k in truth if k.startswith(key + ".")]
    if not below:
        level[parts[-1]] = True
    elif not isinstance(level.get(parts[-1]), dict):
        # A true mapping must not be empty (empty is falsy): give it a false member.
        level[parts[-1]] = {below[0]: False}


def _read(settings: Mapping[str, Any], dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def assumptions(machine: MachineDef, machines: Mapping[str, MachineDef]) -> list[Assumption]:
    """The assumptions a machine on its own is explored under (see the module docstring).

    ``machines`` is not used to vary nested machines' budgets: each machine is explored
    under its own assumptions, and a parent sees every outcome its child can reach.
    """
    del machines
    keys = setting_keys([machine])
    truths = []
    for values in itertools.product((False, True), repeat=len(keys)):
        truth = dict(zip(keys, values, strict=True))
        settings = _settings_for(truth)
        if settings is not None:
            truths.append((truth, settings))
    budgets = list(machine.budgets.values())
    choices = [sorted({1, 2, b.limit}) for b in budgets]
    limit_sets = list(itertools.product(*choices))
    if len(limit_sets) * len(truths) > _MAX_ASSUMPTIONS:
        defaults = tuple(b.limit for b in budgets)
        limit_sets = list(dict.fromkeys([defaults, (1,) * len(budgets), (2,) * len(budgets)]))
    found = []
    for limits in limit_sets:
        overrides = {b.name: limit for b, limit in zip(budgets, limits, strict=True)}
        changed = [
            f"{b.name}={limit}"
            for b, limit in zip(budgets, limits, strict=True)
            if limit != b.limit
        ]
        for truth, settings in truths:
            words = []
            if changed:
                words.append("budget limits " + ", ".join(changed))
            shown = [f"{k}={'on' if v else 'off'}" for k, v in truth.items()]
            if shown:
                words.append("settings " + ", ".join(shown))
            found.append(
                Assumption(
                    MappingProxyType({**settings, "budgets": overrides}),
                    "; ".join(words),
                    len(changed),
                )
            )
    return found


# --------------------------------------------------------------------------- exploring


def fireable(name: str, machines: Mapping[str, MachineDef]) -> frozenset[tuple[int, str]] | None:
    """``(transition index, source state)`` of every transition machine ``name`` can take.

    Over every assumption of the machine on its own (settings, budget limits, payload
    values), and each budget's limit at 0 too (a node may give no units at all);
    ``None`` when the exploration was cut short, so nothing is known unfireable.
    """
    explorer = Explorer(machines)
    spaces = list(explorer.explore_all(name))
    zeros = [
        Assumption(MappingProxyType({**a.settings, "budgets": {**a.settings["budgets"], b: 0}}))
        for a in assumptions(machines[name], machines)
        for b in machines[name].budgets
    ]
    spaces += [explorer.explore(name, zero) for zero in zeros]  # ``zeros`` keeps their ids
    if any(space.truncated for space in spaces):
        return None
    return frozenset(pair for space in spaces for pair in space.fired)


class Explorer:
    """Explores machines level by level under assumptions, each (machine, assumption) once.

    Args:
        machines: Every machine by name.
        triggers: State → the triggers its action may return, for a graph node (its
            bindings); a state not listed may return any trigger it accepts.
        exact_space: Count budgets unit by unit while states x counts stay within this
            (:data:`EXACT_SPACE` for a graph node); ``None``: always (to cross-check the
            symbolic counts), ``0``: only within the window.
    """

    def __init__(
        self,
        machines: Mapping[str, MachineDef],
        triggers: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
        *,
        exact_space: int | None = 0,
    ) -> None:
        self._machines = machines
        self._exact_space = exact_space
        self._compiled: dict[str, CompiledMachine] = {}
        self._triggers = triggers or {}
        self._spaces: dict[tuple[str, int], Space] = {}
        self._all: dict[str, list[Space]] = {}
        self._visiting: set[str] = set()

    def compiled(self, name: str) -> CompiledMachine:
        """The machine compiled once (the engine's own routing table and guards)."""
        if name not in self._compiled:
            self._compiled[name] = CompiledMachine(self._machines[name])
        return self._compiled[name]

    def explore(self, name: str, assumption: Assumption) -> Space:
        """Explore machine ``name`` under ``assumption`` (nested machines under the same)."""
        key = (name, id(assumption.settings))
        if key not in self._spaces:
            self._spaces[key] = self._explore(
                self._machines[name], assumption, None, MAX_CONFIGURATIONS
            )
        return self._spaces[key]

    def explore_all(self, name: str) -> list[Space]:
        """Explore machine ``name`` under every assumption of a machine on its own."""
        if name not in self._all:
            machine = self._machines[name]
            self._visiting.add(name)
            try:
                outcomes = self._child_outcomes_all(machine)
                spaces: list[Space] = []
                left = MAX_CONFIGURATIONS
                for assumption in assumptions(machine, self._machines):
                    if left <= 0:  # the budget is spent: what was explored is partial
                        spaces[-1].truncated = True
                        break
                    spaces.append(self._explore(machine, assumption, outcomes, left))
                    left -= len(spaces[-1].parent)
                self._all[name] = spaces
            finally:
                self._visiting.discard(name)
        return self._all[name]

    def _child_outcomes_all(self, machine: MachineDef) -> dict[str, frozenset[str]]:
        found: dict[str, frozenset[str]] = {}
        for state in machine.states.values():
            child = state.machine
            if child is None or child not in self._machines or child in self._visiting:
                continue
            spaces = self.explore_all(child)
            found[child] = frozenset(o for space in spaces for o in space.outcomes)
        return found

    def _moves(
        self,
        machine: MachineDef,
        state: str,
        assumption: Assumption,
        outcomes: Mapping[str, frozenset[str]] | None,
    ) -> list[str]:
        declared = machine.states[state]
        if declared.machine is not None:
            child = declared.machine
            if outcomes is not None:
                return sorted(outcomes.get(child, ()))
            if child not in self._machines or child in self._visiting:
                return []
            self._visiting.add(child)
            try:
                return sorted(self.explore(child, assumption).outcomes)
            finally:
                self._visiting.discard(child)
        legal = self.compiled(machine.name).legal_triggers(state)
        allowed = self._triggers.get((machine.name, state))
        if allowed is None:
            return list(legal)
        return [t for t in legal if t in allowed]

    def _explore(
        self,
        machine: MachineDef,
        assumption: Assumption,
        outcomes: Mapping[str, frozenset[str]] | None,
        limit: int = MAX_CONFIGURATIONS,
    ) -> Space:
        space = Space(machine, assumption)
        walk = _Walk(self.compiled(machine.name), space, self._exact_space)
        start = walk.start()
        if start is None:
            return walk.space
        queue = deque([start])
        moves_of: dict[str, list[str]] = {}
        while queue:
            config = queue.popleft()
            declared = machine.states[config.state]
            if declared.final is not None:
                walk.space.outcomes.setdefault(str(declared.final), config)
                continue
            if len(walk.space.parent) >= limit:
                walk.space.truncated = True
                break
            if config.state not in moves_of:
                moves_of[config.state] = self._moves(machine, config.state, assumption, outcomes)
            for trigger in moves_of[config.state]:
                queue.extend(walk.fire(config, trigger, nested=declared.machine is not None))
        return walk.space


class _Walk:
    """One breadth-first exploration: fires every move from a configuration."""

    def __init__(self, compiled: CompiledMachine, space: Space, exact_space: int | None) -> None:
        machine = space.machine
        self.compiled = compiled
        self.space = space
        self.machine = machine
        self.budgets = list(machine.budgets)
        self.limits = compiled.limits(space.assumption.settings)
        self.relevant = _relevant(machine, self.budgets, compiled)
        self.candidates = _candidates(machine)
        # Budgets only actions spend: a result may spend them up (see the module docstring).
        self.by_actions = [name for name, b in machine.budgets.items() if not b.spend_on]
        self.window = window(machine)
        self.symbolic = self._symbolic(exact_space)

    def _symbolic(self, exact_space: int | None) -> list[bool]:
        """Per budget: counted symbolically far from its limit (see the module docstring)."""
        symbolic = [False] * len(self.budgets)
        if exact_space is None:
            return symbolic
        size = len(self.machine.states)
        for index in sorted(range(len(self.budgets)), key=lambda i: self.limits[self.budgets[i]]):
            limit = self.limits[self.budgets[index]]
            if limit <= self.window + 1:
                continue  # no count is far from the limit
            if size * (limit + 1) <= exact_space:
                size *= limit + 1
            else:
                symbolic[index] = True
        return symbolic

    def _far(self, index: int, spent: int) -> bool:
        """The counter has more than the window left: it stands for every such count."""
        return self.symbolic[index] and self.limits[self.budgets[index]] - spent > self.window

    def start(self) -> Config | None:
        """The initial configuration (None when entering it already exceeds a budget)."""
        spent = [0] * len(self.budgets)
        for budget in self.compiled.spends(self.machine.initial):
            index = self.budgets.index(budget)
            if spent[index] >= self.limits[budget]:
                self.space.start_refused = True
                return None
            spent[index] += 1
        # Far from the limit, a count is kept as 0 (any count there decides the same).
        spent = [0 if self._far(i, v) else v for i, v in enumerate(spent)]
        start = Config(self.machine.initial, tuple(spent))
        self.space.parent[start] = None
        return start

    def fire(self, config: Config, trigger: str, *, nested: bool) -> list[Config]:
        """Fire ``trigger`` with every payload its guards read; the new configurations."""
        listed = self.candidates.get((config.state, trigger), ())
        keys = [] if nested else payload_keys(self.machine.transitions[i] for i in listed)
        dests = self.space.edges.setdefault(config, [])
        fresh = []
        for counters in self._spendings(config, nested):
            for values in itertools.product((False, True), repeat=len(keys)):
                payload = dict(zip(keys, values, strict=True))
                fresh += self._move(config, trigger, payload, listed, counters, dests)
        return fresh

    def _spendings(self, config: Config, nested: bool) -> list[dict[str, int]]:
        """The counters an action's result may leave: as they were, or spent up."""
        counters = dict(zip(self.budgets, config.spent, strict=True))
        open_ = [] if nested else [b for b in self.by_actions if counters[b] < self.limits[b]]
        found = []
        for spent in itertools.product((False, True), repeat=len(open_)):
            after = dict(counters)
            after.update({b: self.limits[b] for b, up in zip(open_, spent, strict=True) if up})
            found.append(after)
        return found

    def _move(
        self,
        config: Config,
        trigger: str,
        payload: Mapping[str, bool],
        listed: tuple[int, ...],
        counters: Mapping[str, int],
        dests: list[Config],
    ) -> list[Config]:
        """Fire one trigger with one payload; the configurations it reaches first."""
        chosen = self.compiled.choose(
            config.state,
            trigger,
            counters=counters,
            limits=self.limits,
            payload=payload,
            settings=self.space.assumption.settings,
        )
        if chosen is None:
            if listed:
                self._gap(config, trigger, payload, listed, counters)
            return []
        index, dest = chosen
        self.space.fired.add((listed[index], config.state))
        shown = [k for k, v in payload.items() if v]
        spent = [b for b in self.by_actions if counters[b] > config.spent[self.budgets.index(b)]]
        label = trigger + (f" [payload {', '.join(shown)}]" if shown else "")
        label += f" [{', '.join(spent)} spent]" if spent else ""
        fresh = []
        spends = bool(self.compiled.spends(dest))
        for target, near in self._entered([counters[b] for b in self.budgets], dest):
            if target not in dests:
                dests.append(target)
            if spends:
                self.space.spending.add((config, target))
            if target in self.space.parent:
                continue
            note = "".join(
                f" [repeated until {b} has {self.window} of {self.limits[b]} left]" for b in near
            )
            self.space.parent[target] = (config, label + note)
            fresh.append(target)
        return fresh

    def _entered(self, spent: list[int], dest: str) -> list[tuple[Config, list[str]]]:
        """The configurations entering ``dest`` may lead to.

        Each comes with the budgets the move brought from far from their limit to the
        window (the moves a trace shows as repeated).
        """
        options: list[tuple[list[int], list[str]]] = [(list(spent), [])]
        for budget in self.compiled.spends(dest):
            index = self.budgets.index(budget)
            grown: list[tuple[list[int], list[str]]] = []
            for after, near in options:
                if self._far(index, after[index]):
                    # One more unit from "far" may stay far, or reach the window exactly.
                    edge = list(after)
                    edge[index] = self.limits[budget] - self.window
                    grown += [(after, near), (edge, [*near, budget])]
                else:
                    after[index] += 1
                    grown.append((after, near))
            options = grown
        # A counter no guard can read any more is forgotten: it cannot change what
        # happens next, and keeping it would multiply the space.
        keep = self.relevant[dest]
        return [
            (Config(dest, tuple(v if keep[i] else 0 for i, v in enumerate(after))), near)
            for after, near in options
        ]

    def _gap(
        self,
        config: Config,
        trigger: str,
        payload: Mapping[str, bool],
        listed: tuple[int, ...],
        counters: Mapping[str, int],
    ) -> None:
        read = _budgets_read(self.machine, listed, self.compiled)
        spent = tuple(b for b in self.budgets if b in read and counters[b] >= self.limits[b])
        gap = Gap(config, trigger, tuple(payload.items()), spent)
        self.space.gaps.setdefault((config.state, trigger), gap)


def window(machine: MachineDef) -> int:
    """Units left up to which ``machine``'s budgets are counted exactly.

    At least 3, and at least its non-final states, so the last lap of any loop through
    them, as the budget runs out, is explored exactly.
    """
    return max(3, sum(1 for state in machine.states.values() if state.final is None))


def _budgets_read(
    machine: MachineDef, listed: Iterable[int], compiled: CompiledMachine
) -> set[str]:
    """Budgets the guards of these transitions read (their own and their destination's)."""
    read: set[str] = set()
    for index in listed:
        transition = machine.transitions[index]
        read |= {
            p.partition(":")[2]
            for p in (*transition.conditions, *transition.unless)
            if p.startswith("budget:")
        }
        if transition.dest in machine.states:
            read |= set(compiled.spends(transition.dest))
    return read


def _relevant(
    machine: MachineDef, budgets: list[str], compiled: CompiledMachine
) -> dict[str, tuple[bool, ...]]:
    """State → per budget, whether a guard can still read its counter from there.

    A counter is read by a ``budget:`` predicate and by the engine's guard on entering
    a state that spends it; from a state, only transitions reachable from it can read.
    """
    nexts: dict[str, set[str]] = {name: set() for name in machine.states}
    for transition in machine.transitions:
        for source in transition.source:
            nexts.setdefault(source, set()).add(transition.dest)
    reads: dict[str, set[str]] = {name: set() for name in machine.states}
    for transition in machine.transitions:
        named = {
            p.partition(":")[2]
            for p in (*transition.conditions, *transition.unless)
            if p.startswith("budget:")
        }
        if transition.dest in machine.states:
            named |= set(compiled.spends(transition.dest))
        for source in transition.source:
            reads.setdefault(source, set()).update(named)
    relevant: dict[str, tuple[bool, ...]] = {}
    for name in machine.states:
        seen, queue = {name}, deque([name])
        while queue:
            for dest in nexts.get(queue.popleft(), ()):
                if dest not in seen:
                    seen.add(dest)
                    queue.append(dest)
        named = set().union(*(reads.get(state, set()) for state in seen))
        relevant[name] = tuple(budget in named for budget in budgets)
    return relevant


def _candidates(machine: MachineDef) -> dict[tuple[str, str], tuple[int, ...]]:
    """(source, trigger) → the indices of its transitions, in declaration order.

    The order the engine's routing table tries them in (a property test checks it).
    """
    found: dict[tuple[str, str], list[int]] = {}
    for index, transition in enumerate(machine.transitions):
        for source in transition.source:
            found.setdefault((source, transition.trigger), []).append(index)
    return {key: tuple(value) for key, value in found.items()}


def payload_keys(transitions: Iterable[TransitionDef]) -> list[str]:
    """The ``payload:`` keys ``transitions`` read, sorted."""
    return sorted(
        {
            p.partition(":")[2]
            for t in transitions
            for p in (*t.conditions, *t.unless)
            if p.startswith("payload:")
        }
    )
