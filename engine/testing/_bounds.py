"""Termination bounds a person can check: per node, per machine level, in its own units.

A node's budgets bound it level by level: each budget allows at most its limit (after
the node's ``with.budgets`` overrides) of entries into its ``spend_on`` states, or of
units its actions spend; a nested machine starts afresh, with fresh budgets, on each
entry into its state. So the bound is said the same way: budget by budget, level by
level, never as one product over the whole node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phasegraph.model import MachineDef

__all__ = ["machine_bounds", "node_bounds"]


def node_bounds(
    node_id: str, machine: str, machines: Mapping[str, MachineDef], settings: Mapping[str, Any]
) -> list[str]:
    """The bound of one graph node, as lines (nested levels indented)."""
    return _level(f"node {node_id!r} on machine {machine!r}", machine, machines, settings, "", ())


def machine_bounds(machine: str, machines: Mapping[str, MachineDef]) -> list[str]:
    """The bound of a machine on its own (its declared limits), as lines."""
    return _level(f"machine {machine!r}", machine, machines, {}, "", ())


def _level(
    head: str,
    name: str,
    machines: Mapping[str, MachineDef],
    settings: Mapping[str, Any],
    indent: str,
    stack: tuple[str, ...],
) -> list[str]:
    machine = machines.get(name)
    if machine is None or name in stack:
        return []
    overrides = settings.get("budgets") or {}
    spent = []
    for budget in machine.budgets.values():
        limit = int(overrides.get(budget.name, budget.limit))
        how = (
            "one per entry into " + ", ".join(budget.spend_on)
            if budget.spend_on
            else "spent by its actions"
        )
        spent.append(f"{budget.name}: at most {limit} ({how})")
    repeating = _on_cycles(machine)
    loops = (
        "no state is entered twice"
        if not repeating
        else f"{', '.join(sorted(repeating))} repeat, every lap spending a budget"
    )
    lines = [f"{indent}{head}: {'; '.join(spent) or 'no budget'}; {loops}"]
    children: dict[str, list[str]] = {}
    for state in machine.states.values():
        if state.machine is not None:
            children.setdefault(state.machine, []).append(state.name)
    for child, states in children.items():
        times = (
            "once per lap"
            if set(states) & repeating
            else ("at most once" if len(states) == 1 else "each at most once")
        )
        lines += _level(
            f"{', '.join(states)} runs machine {child!r} afresh ({times})",
            child,
            machines,
            settings,
            indent + "  ",
            (*stack, name),
        )
    return lines


def _on_cycles(machine: MachineDef) -> set[str]:
    """States some path of transitions leads back to (guards aside)."""
    nexts: dict[str, set[str]] = {name: set() for name in machine.states}
    for transition in machine.transitions:
        for source in transition.source:
            nexts.setdefault(source, set()).add(transition.dest)
    found = set()
    for start in machine.states:
        seen: set[str] = set()
        todo = list(nexts.get(start, ()))
        while todo:
            state = todo.pop()
            if state == start:
                found.add(start)
                break
            if state not in seen:
                seen.add(state)
                todo.extend(nexts.get(state, ()))
    return found
