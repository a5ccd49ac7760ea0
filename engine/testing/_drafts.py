"""A first draft of a machine's examples, read off the machine itself.

``phasegraph test MACHINE --draft-examples`` prints ``examples:`` that show every goal
of the machine (:func:`phasegraph.testing._examples.goals`: each transition from each
of its sources, each budget run out at its default limit) its declared examples do not
show yet: for each, the shortest path from the initial state that shows it, then the
shortest way on to a final state. Paths are searched under the machine's own limits
first, then with small budget limits (one budget spent at a time), each ``setting:``
switch on and off and each ``payload:`` key true and false, through the engine's own
stepping; a budget to run out is searched for under its own default limit (the others
small, then roomier), and a step repeated in a row is written once with ``times:``. A
draft passes by construction: it records what the machine does, not what its author
meant, so read each one, keep those that say what you mean (rename them to say it) and
fix the machine where one does not.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from phasegraph.analysis._check import machine_family
from phasegraph.core._machine import MachineSet, StepResult, compile_machines
from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError
from phasegraph.model import PATH_SEPARATOR, MachineDef
from phasegraph.testing._examples import (
    Goal,
    fired_by,
    goals,
    machine_examples,
    ran_out,
    run_examples,
)

__all__ = ["draft_examples"]

_NODE = "draft"
_DEPTH = 16  # longest path searched (under small limits; 6 under the machine's own)
_Key = tuple[tuple[str, ...], tuple[tuple[str, int], ...]]


@dataclass(frozen=True, slots=True)
class _Move:
    trigger: str
    payload: Mapping[str, bool]
    result: StepResult
    fired: tuple[Goal, ...]


def draft_examples(source: str) -> str:
    """``examples:`` (YAML) taking every transition of ``source`` no declared example takes.

    Raises:
        InputError: The machine cannot be read.
    """
    root, family = machine_family(source)
    declared = machine_examples(root)
    taken = {goal for r in run_examples(declared, family) if r.ok for goal in r.fired}
    wanted = set(goals(root, family)) - taken
    machines = compile_machines(family)
    drafts: list[tuple[dict[str, Any], list[_Move]]] = []
    payloads = _payloads(family)
    for settings, depth in _searches(family, root, wanted):
        for path in _paths(machines, root.name, settings, payloads, depth):
            if not {goal for move in path for goal in move.fired} & wanted:
                continue
            rest = _to_end(machines, root.name, settings, payloads, path[-1].result)
            if rest is None:
                continue
            drafts.append((settings, path + rest))
            wanted -= {goal for move in path + rest for goal in move.fired}
    lines = [] if declared else ["examples:"]
    names = {example.name for example in declared}
    for settings, moves in drafts:
        lines += _render(settings, moves, names)
    missed = sorted(wanted)
    if missed:
        what = "; ".join(_goal_words(goal, root) for goal in missed)
        lines.append(f"  # no path found for {what}: write those by hand")
    return "\n".join(lines) + "\n" if lines else ""


def _goal_words(goal: Goal, root: MachineDef) -> str:
    if goal.budget:
        return f"budget {goal.name} run out"
    return f"transition {goal.transition} from {goal.name}"


def _searches(
    family: Mapping[str, MachineDef], root: MachineDef, wanted: set[Goal]
) -> Iterator[tuple[dict[str, Any], int]]:
    """Settings to search under, and how deep: the variants, then each budget to run out.

    ``wanted`` is read as it shrinks: a budget some earlier path ran out is not searched.
    """
    for variant in _variants(family):
        yield variant, _DEPTH if "budgets" in variant else 6
    budgets = {b.name: b for m in family.values() for b in m.budgets.values()}
    live = sum(1 for state in root.states.values() if state.final is None)
    switches = _switches(family)
    for budget in root.budgets.values():
        if Goal(root.name, -1, budget.name) not in wanted:
            continue
        others = [b for b in budgets.values() if b.name != budget.name and b.spend_on]
        # The others at 2, then roomier: running one out may take several of another.
        for room, combo in itertools.product((2, 2 * live), itertools.product(*switches)):
            if Goal(root.name, -1, budget.name) not in wanted:
                break
            settings: dict[str, Any] = {k: v for k, v in combo if v is not None}
            small = {b.name: room for b in others if b.limit != room}
            if small:
                settings["budgets"] = small
            yield settings, _DEPTH + (budget.limit + 1) * live


def _payloads(family: Mapping[str, MachineDef]) -> list[dict[str, bool]]:
    keys = sorted(
        {
            p.partition(":")[2]
            for machine in family.values()
            for t in machine.transitions
            for p in (*t.conditions, *t.unless)
            if p.startswith("payload:")
        }
    )
    return [
        {k: v for k, v in zip(keys, values, strict=True) if v}
        for values in itertools.product((False, True), repeat=len(keys))
    ]


def _switches(family: Mapping[str, MachineDef]) -> list[list[tuple[str, Any]]]:
    """Per top-level setting a guard reads, the values to try (``None``: absent)."""
    read: dict[str, set[str]] = {}
    for machine in family.values():
        for t in machine.transitions:
            for p in (*t.conditions, *t.unless):
                kind, _, dotted = p.partition(":")
                if kind == "setting":
                    top, _, below = dotted.partition(".")
                    read.setdefault(top, set()).update([below] if below else [])
    options: list[list[tuple[str, Any]]] = []
    for top, inner in sorted(read.items()):
        if inner:  # a switch such as recovery.enabled: absent, on, off
            key = sorted(inner)[0]
            options.append([(top, None), (top, {key: True}), (top, {key: False})])
        else:
            options.append([(top, None), (top, True)])
    return options


def _variants(family: Mapping[str, MachineDef]) -> list[dict[str, Any]]:
    """Settings to search under: each switch off and on, with each budget made small."""
    budgets = {b.name: b for m in family.values() for b in m.budgets.values()}
    options = _switches(family)
    small = {n: 2 for n, b in budgets.items() if b.spend_on and b.limit > 2}
    limits: list[dict[str, int]] = [{}, small]
    limits += [{**small, n: 0} for n in budgets]
    limits += [{**small, n: 2} for n, b in budgets.items() if b.spend_on and b.limit < 2]
    found: list[dict[str, Any]] = []
    for combo in itertools.product(*options):
        for chosen in limits:
            settings: dict[str, Any] = {k: v for k, v in combo if v is not None}
            if chosen:
                settings["budgets"] = chosen
            if settings not in found:
                found.append(settings)
    return found


def _key(result: StepResult) -> _Key:
    return result.position.path, tuple(sorted(result.position.counters.items()))


def _moves(
    machines: MachineSet,
    root: str,
    settings: Mapping[str, Any],
    payloads: list[dict[str, bool]],
    at: StepResult,
) -> Iterator[_Move]:
    for trigger in machines.legal_triggers(root, at.position.path):
        for payload in payloads:
            try:
                result = machines.step(
                    root, at.position, trigger, node_id=_NODE, settings=settings, payload=payload
                )
            except (IllegalTriggerError, BudgetExhaustedError):
                continue
            fired = fired_by(machines, root, at.position, trigger, payload, settings)
            fired = ran_out(machines, root, at.position, settings, fired) + fired
            yield _Move(trigger, payload, result, tuple(fired))


def _paths(
    machines: MachineSet,
    root: str,
    settings: Mapping[str, Any],
    payloads: list[dict[str, bool]],
    depth: int,
) -> Iterator[list[_Move]]:
    """Every step from every configuration reached, breadth first, with its shortest path."""
    try:
        start = machines.start(root, _NODE, settings)
    except BudgetExhaustedError:
        return
    queue: deque[tuple[StepResult, list[_Move]]] = deque([(start, [])])
    seen = {_key(start)}
    while queue:
        at, path = queue.popleft()
        if at.outcome is not None or len(path) >= depth:
            continue
        for move in _moves(machines, root, settings, payloads, at):
            yield [*path, move]
            if _key(move.result) not in seen:
                seen.add(_key(move.result))
                queue.append((move.result, [*path, move]))


def _to_end(
    machines: MachineSet,
    root: str,
    settings: Mapping[str, Any],
    payloads: list[dict[str, bool]],
    at: StepResult,
) -> list[_Move] | None:
    """The shortest way on from ``at`` to a final state."""
    queue: deque[tuple[StepResult, list[_Move]]] = deque([(at, [])])
    seen = {_key(at)}
    while queue:
        here, path = queue.popleft()
        if here.outcome is not None:
            return path
        for move in _moves(machines, root, settings, payloads, here):
            if _key(move.result) not in seen:
                seen.add(_key(move.result))
                queue.append((move.result, [*path, move]))
    return None


def _flow(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _settings_words(settings: Mapping[str, Any]) -> str:
    words = []
    for key, value in settings.items():
        if key == "budgets":
            words += [f"{budget} {limit}" for budget, limit in value.items()]
        elif isinstance(value, Mapping):
            words += [f"{key}.{k} {'on' if v else 'off'}" for k, v in value.items()]
        else:
            words.append(f"{key} on")
    return f" (with {', '.join(words)})" if words else ""


def _runs(moves: list[_Move]) -> list[tuple[_Move, int]]:
    """The moves, a step repeated in a row (same trigger, payload and state) given once."""
    runs: list[tuple[_Move, int]] = []
    for move in moves:
        if runs and _same(runs[-1][0], move):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((move, 1))
    return runs


def _same(one: _Move, other: _Move) -> bool:
    return (one.trigger, dict(one.payload), _path(one)) == (
        other.trigger,
        dict(other.payload),
        _path(other),
    )


def _step(move: _Move, times: int) -> str:
    if not move.payload and times == 1:
        return f"{move.trigger} -> {_path(move)}"
    payload = f", payload: {_flow(move.payload)}" if move.payload else ""
    repeated = f", times: {times}" if times > 1 else ""
    return f"{{trigger: {move.trigger}{payload}, to: {_path(move)}{repeated}}}"


def _render(settings: Mapping[str, Any], moves: list[_Move], names: set[str]) -> list[str]:
    end = moves[-1].result
    state = PATH_SEPARATOR.join(end.position.path)
    runs = _runs(moves)
    triggers = ", ".join(m.trigger + (f" x{n}" if n > 1 else "") for m, n in runs)
    name = base = f"{triggers} ends in {state}{_settings_words(settings)}"
    for number in itertools.count(2):
        if name not in names:
            break
        name = f"{base} #{number}"
    names.add(name)
    lines = [f"  - name: {name}"]
    if settings:
        lines.append(f"    with: {_flow(settings)}")
    steps = [_step(move, times) for move, times in runs]
    one = f"    steps: [{', '.join(steps)}]"
    lines += [one] if len(one) <= 92 else ["    steps:", *(f"      - {s}" for s in steps)]
    lines.append(f"    outcome: {end.outcome}")
    spent = {k: v for k, v in sorted(end.position.counters.items()) if v}
    if spent:
        lines.append(f"    spent: {_flow(spent)}")
    return lines


def _path(move: _Move) -> str:
    return PATH_SEPARATOR.join(move.result.position.path)
