"""Paths through machines, for ``phasegraph check``: reachability, loops and hook sites.

A machine is seen as a directed graph of its states: an edge for each declared transition
that can fire. Guards are ignored (any may hold), so "unreachable" and "cannot finish" are
certain, while a loop found here may in fact be cut by a guard. A nesting state is left
only on the outcomes its nested machine can end with; with ``declared`` triggers (a
graph node's bindings), a hooked state is left only on what its action declares (or
``error``, which the engine fires when an action raises).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.model import EMPTY, PATH_SEPARATOR, MachineDef, StateDef, nested_machines

__all__ = ["Explored", "Explorer", "HookSite", "cycle_through", "loops"]


@dataclass(frozen=True, slots=True)
class Explored:
    """What can happen in one machine.

    Attributes:
        edges: State → the states a transition that can fire leads to.
        reachable: States reachable from the initial state (itself included).
        finishing: States from which some final state can be reached (finals included).
        outcomes: Outcome → a reachable final state that ends the machine with it.
    """

    edges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reachable: frozenset[str] = frozenset()
    finishing: frozenset[str] = frozenset()
    outcomes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HookSite:
    """A state carrying a hook, somewhere in a machine or the machines it nests.

    Attributes:
        path: The state path (``parent/child``).
        accepted: Triggers the state has a transition for.
        leaving: Of those, the triggers with a transition to another state.
    """

    path: str
    accepted: frozenset[str]
    leaving: frozenset[str]


def _closure(start: Iterable[str], edges: Mapping[str, Iterable[str]]) -> frozenset[str]:
    seen = set(start)
    queue = deque(seen)
    while queue:
        for dest in edges.get(queue.popleft(), ()):
            if dest not in seen:
                seen.add(dest)
                queue.append(dest)
    return frozenset(seen)


class Explorer:
    """Explores machines by name, each once (a nested machine's outcomes feed its parent).

    Args:
        machines: Every machine by name.
        declared: Hook → triggers its action declares (a graph node's bindings); an empty
            tuple or a missing hook means any accepted trigger. ``None``: no bindings.
    """

    def __init__(
        self,
        machines: Mapping[str, MachineDef],
        declared: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._machines = machines
        self._declared = declared
        self._explored: dict[str, Explored] = {}
        self._visiting: set[str] = set()

    def explore(self, name: str) -> Explored:
        """What can happen in machine ``name`` (nothing, if it is unknown or recursive)."""
        machine = self._machines.get(name)
        if machine is None or name in self._visiting:
            return Explored()
        if name not in self._explored:
            self._visiting.add(name)
            try:
                self._explored[name] = self._explore(machine)
            finally:
                self._visiting.discard(name)
        return self._explored[name]

    def _explore(self, machine: MachineDef) -> Explored:
        allowed = {name: self._allowed(state) for name, state in machine.states.items()}
        edges: dict[str, list[str]] = {name: [] for name in machine.states}
        backwards: dict[str, list[str]] = {name: [] for name in machine.states}
        for transition in machine.transitions:
            if transition.dest not in machine.states:
                continue
            for source in transition.source:
                if source not in edges:
                    continue
                if allowed[source] is None or transition.trigger in (allowed[source] or ()):
                    edges[source].append(transition.dest)
                    backwards[transition.dest].append(source)
        initial = [machine.initial] if machine.initial in machine.states else []
        reachable = _closure(initial, edges)
        finals = [s.name for s in machine.states.values() if s.final is not None]
        outcomes: dict[str, str] = {}
        for name in finals:
            final = machine.states[name].final
            if name in reachable and final is not None:
                outcomes.setdefault(str(final), name)
        return Explored(
            edges=MappingProxyType({k: tuple(dict.fromkeys(v)) for k, v in edges.items()}),
            reachable=reachable,
            finishing=_closure(finals, backwards),
            outcomes=MappingProxyType(outcomes),
        )

    def _allowed(self, state: StateDef) -> frozenset[str] | None:
        """The triggers that can reach ``state``; ``None`` for any it accepts."""
        if state.machine is not None:
            return frozenset(self.explore(state.machine).outcomes)
        declared = (self._declared or EMPTY).get(state.hook or "", ())
        return frozenset((*declared, ERROR_TRIGGER)) if declared else None

    def family(self, name: str) -> list[str]:
        """``name`` and every known machine nested in it, each once, outermost first."""
        return [machine.name for machine in nested_machines(name, self._machines)]

    def hook_sites(self, name: str, prefix: str = "") -> dict[str, list[HookSite]]:
        """Hook → every state carrying it in ``name`` and the machines nested in it."""
        sites: dict[str, list[HookSite]] = {}
        machine = self._machines.get(name)
        if machine is None or name in self._visiting:
            return sites
        self._visiting.add(name)
        try:
            for state in machine.states.values():
                path = prefix + state.name
                if state.hook:
                    sites.setdefault(state.hook, []).append(_site(machine, state.name, path))
                if state.machine:
                    nested = self.hook_sites(state.machine, path + PATH_SEPARATOR)
                    for hook, found in nested.items():
                        sites.setdefault(hook, []).extend(found)
        finally:
            self._visiting.discard(name)
        return sites


def _site(machine: MachineDef, state: str, path: str) -> HookSite:
    leaving = [t for t in machine.transitions if state in t.source]
    return HookSite(
        path=path,
        accepted=frozenset(t.trigger for t in leaving),
        leaving=frozenset(t.trigger for t in leaving if t.dest != state),
    )


def loops(nodes: Sequence[str], edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of ``nodes`` that lie on a common cycle using only ``nodes``.

    Each group is a strongly connected component with a cycle (two or more states, or
    one with a transition to itself), listed in ``nodes`` order.
    """
    inside = set(nodes)
    within = {n: [d for d in edges.get(n, ()) if d in inside] for n in nodes}
    after = {n: _closure(within[n], within) for n in nodes}  # reachable in one step or more
    groups: list[list[str]] = []
    placed: set[str] = set()
    for node in nodes:
        if node in placed or node not in after[node]:
            continue
        group = [other for other in nodes if other in after[node] and node in after[other]]
        placed.update(group)
        groups.append(group)
    return groups


def cycle_through(group: Sequence[str], edges: Mapping[str, Iterable[str]]) -> list[str]:
    """A shortest cycle from ``group[0]`` back to itself inside ``group``, both ends listed."""
    start, inside = group[0], set(group)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        current = queue.popleft()
        for dest in edges.get(current, ()):
            if dest == start:
                path = [current]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if dest in inside and dest not in parent:
                parent[dest] = current
                queue.append(dest)
    return [start, start]
