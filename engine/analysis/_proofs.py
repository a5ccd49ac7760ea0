"""Findings proved by exhaustive exploration (:mod:`phasegraph.analysis._explore`).

Every finding here comes with a shortest trace a person can follow, and holds with the
machine's guards and budgets taken into account (the flat rules of
:mod:`phasegraph.analysis._rules` ignore guards):

=======================  =======================================================
code                     meaning
=======================  =======================================================
``guard-gap``            a trigger some payload, setting or spent budget leaves
                         refused by every guard: the node fails there
``dead-transition``      a transition that can never fire
``shadowed-transition``  a transition never taken because an earlier one for the
                         same trigger always wins
``outcome-unreachable``  a final state (an outcome) no run can end in
``no-final-path``        a reachable configuration from which no final state
                         can be reached
``unbounded-cycle``      a loop the guards let repeat that no budget bounds
``overlapping-guards``   two transitions for one trigger whose ``payload:``
                         guards can hold together (the first silently wins)
``exploration-bounded``  the space was too large to explore whole: the proofs
                         are incomplete (a note, not a defect)
=======================  =======================================================

A machine on its own is explored under every assumption of
:func:`~phasegraph.analysis._explore.assumptions` (so "dead" means dead however a node
sets it up); a graph node is explored with its own settings and the triggers its
bindings declare, and reports only what makes that node fail or never finish.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.analysis._explore import (
    EXACT_SPACE,
    MAX_CONFIGURATIONS,
    Assumption,
    Config,
    Explorer,
    Space,
)
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.errors import SourceLocation
from phasegraph.model import MachineDef, NodeDef, TransitionDef

__all__ = ["Proofs", "edge_marks", "machine_proofs", "node_proofs"]


@dataclass(frozen=True, slots=True)
class Proofs:
    """What exploration proved about one machine on its own.

    Attributes:
        findings: Key (what a finding is about) → the finding with the shortest trace.
        complete: Every exploration ran to the end (none stopped at the bound).
    """

    findings: Mapping[tuple[str, ...], Finding]
    complete: bool


@dataclass(frozen=True, slots=True)
class _Found:
    """A finding before de-duplication.

    ``key`` says what it is about; ``size`` ranks its trace (the smallest is kept).
    """

    key: tuple[str, ...]
    size: tuple[int, int]
    finding: Finding


def _error(code: Code, message: str, where: SourceLocation | None) -> Finding:
    return Finding(severity=Severity.ERROR, code=code, message=message, location=where)


def _under(assumption: Assumption) -> str:
    return f" (with {assumption.label})" if assumption.label else ""


def _edge(transition: TransitionDef) -> str:
    line = (
        f" (line {transition.location.line})"
        if transition.location and transition.location.line
        else ""
    )
    sources = ", ".join(transition.source)
    return f"`{transition.trigger}` {sources} -> {transition.dest}{line}"


# --------------------------------------------------------------------------- one space


def _gap_findings(space: Space, prefix: str, lead: str) -> Iterable[_Found]:
    machine = space.machine
    for (state, trigger), gap in space.gaps.items():
        listed = [t for t in machine.transitions if t.trigger == trigger and state in t.source]
        why = []
        if gap.payload:
            why.append(
                "payload " + ", ".join(f"{k}={'true' if v else 'false'}" for k, v in gap.payload)
            )
        if gap.spent:
            why.append("budget " + ", ".join(gap.spent) + " spent")  # e.g. budget reflect spent
        reason = " with " + " and ".join(why) if why else ""
        trace = lead + space.trace_text(gap.config, prefix)
        text = (
            f"machine {machine.name!r}: trigger {trigger!r} in state {prefix + state!r} is "
            f"refused by every guard{reason}{_under(space.assumption)}, so the node fails "
            f"there; shortest trace: {trace} --{trigger}--> refused. Add a last transition "
            f"with no conditions, e.g. `{{trigger: {trigger}, source: {state}, dest: ...}}`"
        )
        where = listed[0].location if listed else machine.states[state].location
        size = (space.assumption.rank, len(space.trace(gap.config)))
        yield _Found(
            ("gap", machine.name, state, trigger), size, _error(Code.GUARD_GAP, text, where)
        )


def _liveness_findings(space: Space, prefix: str, lead: str) -> Iterable[_Found]:
    machine = space.machine
    if space.truncated:
        return
    live = space.live()
    # A state where a refused trigger fails the node is reported as that guard gap.
    reported: set[str] = {state for state, _ in space.gaps}
    for config in space.parent:  # breadth-first order: shortest traces first
        if config in live or config.state in reported:
            continue
        reported.add(config.state)
        text = (
            f"machine {machine.name!r}: a node can reach state {prefix + config.state!r} "
            f"and then never finish{_under(space.assumption)}: no move its guards and budgets "
            f"allow leads to a final state from there; shortest trace: "
            f"{lead}{space.trace_text(config, prefix)}"
        )
        size = (space.assumption.rank, len(space.trace(config)))
        where = machine.states[config.state].location
        yield _Found(("live", machine.name, config.state), size, _error(Code.NO_FINAL, text, where))


def _cycle_findings(space: Space, prefix: str, lead: str) -> Iterable[_Found]:
    machine = space.machine
    cycle = space.cycle()
    if cycle is None:
        return
    into = space.trace_text(cycle[0], prefix)
    loop = " -> ".join(prefix + c.state for c in cycle)
    first = machine.states[cycle[0].state]
    text = (
        f"machine {machine.name!r} can loop {loop} for ever{_under(space.assumption)}: the "
        f"guards let it repeat and no state on the loop spends a budget; reached by "
        f"{lead}{into}. List one of these states in a budget's spend_on, e.g. "
        f"`budgets: {{attempts: {{limit: 3, spend_on: [{first.name}]}}}}`"
    )
    states = tuple(sorted({c.state for c in cycle}))
    found = _error(Code.UNBOUNDED, text, first.location)
    yield _Found(("loop", machine.name, *states), (space.assumption.rank, len(cycle)), found)


def _bounded(space: Space) -> Iterable[_Found]:
    if not space.truncated:
        return
    machine = space.machine
    text = (
        f"machine {machine.name!r}: incomplete: the exploration stopped after "
        f"{MAX_CONFIGURATIONS} configurations{_under(space.assumption)} (states x budget "
        "counters x payload and setting values), so guard gaps, dead transitions and "
        "unreachable outcomes past that point were not looked for; this is not a defect. "
        "To check it whole, split the machine or give it fewer budgets or payload keys"
    )
    found = Finding(
        severity=Severity.NOTE,
        code=Code.EXPLORATION_BOUNDED,
        message=text,
        location=machine.location,
    )
    yield _Found(("bounded", machine.name), (0, 0), found)


# --------------------------------------------------------------------------- machines


def _transition_findings(machine: MachineDef, spaces: list[Space]) -> Iterable[_Found]:
    """Dead and shadowed transitions, over every assumption."""
    if any(space.truncated for space in spaces):
        return
    fired = {index for space in spaces for index, _ in space.fired}
    reached = {config.state for space in spaces for config in space.parent}
    for index, transition in enumerate(machine.transitions):
        if index in fired:
            continue
        sources = [s for s in transition.source if s in reached]
        if not sources:
            continue  # its sources are never reached: reported as unreachable states
        earlier = [
            other
            for position, other in enumerate(machine.transitions[:index])
            if position in fired
            and other.trigger == transition.trigger
            and set(other.source) & set(sources)
        ]
        contradiction = sorted(set(transition.conditions) & set(transition.unless))
        if earlier and not contradiction:
            text = (
                f"machine {machine.name!r}: transition {_edge(transition)} is shadowed: it is "
                f"never taken, because whenever a node in {', '.join(map(repr, sources))} "
                f"fires {transition.trigger!r}, an earlier transition for it, "
                f"{_edge(earlier[0])}, is taken first (the first transition whose guards hold "
                "wins, in any settings and budget limits); move it before that one, narrow "
                "that one's guards, or remove it"
            )
            code = Code.SHADOWED
        elif contradiction:
            text = (
                f"machine {machine.name!r}: transition {_edge(transition)} can never fire: it "
                f"both requires and excludes {', '.join(contradiction)} (in `conditions` and "
                "`unless`); fix its guards or remove it"
            )
            code = Code.DEAD_TRANSITION
        else:
            text = (
                f"machine {machine.name!r}: transition {_edge(transition)} can never fire: its "
                "guards never hold when a node is in "
                f"{', '.join(map(repr, sources))} (in any settings and budget limits); fix its "
                "conditions or remove it"
            )
            code = Code.DEAD_TRANSITION
        yield _Found(
            ("edge", machine.name, str(index)), (0, 0), _error(code, text, transition.location)
        )


def _outcome_findings(
    machine: MachineDef, spaces: list[Space], flat: Iterable[str]
) -> Iterable[_Found]:
    if any(space.truncated for space in spaces):
        return
    reached = {config.state for space in spaces for config in space.parent}
    outcomes = {o for space in spaces for o in space.outcomes}
    del flat  # a final state nothing leads to is as unreachable as a guarded one
    for state in machine.states.values():
        if state.final is None or state.name in reached:
            continue
        lost = "" if str(state.final) in outcomes else f", and no run of it can end {state.final}"
        text = (
            f"machine {machine.name!r}: final state {state.name!r} (outcome {state.final}) can "
            f"never be reached: the transitions into it never fire in any settings and budget "
            f"limits{lost}; fix their guards or remove the state"
        )
        yield _Found(
            ("outcome", machine.name, state.name),
            (0, 0),
            _error(Code.OUTCOME_UNREACHABLE, text, state.location),
        )


def _overlap_findings(machine: MachineDef, reached: set[str]) -> Iterable[_Found]:
    """Two transitions for one trigger and source whose payload guards can both hold."""
    groups: dict[tuple[str, str], list[TransitionDef]] = {}
    for transition in machine.transitions:
        for source in transition.source:
            groups.setdefault((source, transition.trigger), []).append(transition)
    for (source, trigger), listed in groups.items():
        if source not in reached:
            continue
        for first, second in itertools.combinations(listed, 2):
            if first.dest == second.dest:
                continue
            a, b = _payload_guard(first), _payload_guard(second)
            if a is None or b is None or not a[0] or not b[0]:
                continue  # only guards made of payload predicates, each with a condition
            if not _compatible(a, b) or a[0] >= b[0]:
                continue  # exclusive, or the first is a narrowing of the second (a priority)
            both = ", ".join(sorted(a[0] | b[0]))
            text = (
                f"machine {machine.name!r}: in state {source!r}, trigger {trigger!r} goes to "
                f"{first.dest!r} or {second.dest!r} by payload, and both guards hold when "
                f"{both} are all true: the engine then silently takes the first ({_edge(first)}); "
                f"make them exclusive with `unless:` (e.g. `unless: [payload:"
                f"{sorted(a[0])[0]}]` on the second)"
            )
            key = ("overlap", machine.name, source, trigger, first.dest, second.dest)
            yield _Found(key, (0, 0), _error(Code.OVERLAP, text, second.location))


def _payload_guard(transition: TransitionDef) -> tuple[set[str], set[str]] | None:
    predicates = (*transition.conditions, *transition.unless)
    if not all(p.startswith("payload:") for p in predicates):
        return None
    return (
        {p.partition(":")[2] for p in transition.conditions},
        {p.partition(":")[2] for p in transition.unless},
    )


def _compatible(a: tuple[set[str], set[str]], b: tuple[set[str], set[str]]) -> bool:
    return not (a[0] & b[1]) and not (a[1] & b[0])


def machine_proofs(
    explorer: Explorer, machine: MachineDef, flat_reachable: Iterable[str]
) -> Proofs:
    """Every finding exploration proves about ``machine`` on its own."""
    spaces = explorer.explore_all(machine.name)
    found: list[_Found] = []
    for space in spaces:
        found += _gap_findings(space, "", "")
        found += _liveness_findings(space, "", "")
        found += _cycle_findings(space, "", "")
        found += _bounded(space)
    found += _transition_findings(machine, spaces)
    found += _outcome_findings(machine, spaces, flat_reachable)
    reached = {c.state for space in spaces for c in space.parent}
    found += _overlap_findings(machine, reached)
    complete = not any(space.truncated for space in spaces)
    return Proofs(_shortest(found), complete)


def _shortest(found: Iterable[_Found]) -> dict[tuple[str, ...], Finding]:
    best: dict[tuple[str, ...], _Found] = {}
    for item in found:
        if item.key not in best or item.size < best[item.key].size:
            best[item.key] = item
    return {key: item.finding for key, item in best.items()}


# --------------------------------------------------------------------------- nodes


def node_triggers(
    node: NodeDef, machines: Mapping[str, MachineDef]
) -> dict[tuple[str, str], tuple[str, ...]]:
    """(machine, state) → what the node's bound action may return there (when declared)."""
    allowed: dict[tuple[str, str], tuple[str, ...]] = {}
    for machine in machines.values():
        for state in machine.states.values():
            action = node.bind.get(state.hook or "")
            if action is None or state.hook is None:
                continue
            if action.kind == "human":
                replies = action.triggers
                if not replies:
                    continue
                timeout = (TIMEOUT_TRIGGER,) if action.config.get("timeout") is not None else ()
                allowed[(machine.name, state.name)] = (*replies, *timeout)
            elif action.kind == "graph":  # a child run's gate: answered, never an error
                allowed[(machine.name, state.name)] = action.triggers
            elif action.triggers:
                allowed[(machine.name, state.name)] = (*action.triggers, ERROR_TRIGGER)
    return allowed


def node_proofs(
    node: NodeDef,
    machines: Mapping[str, MachineDef],
    known: Callable[[tuple[str, ...]], bool],
) -> list[Finding]:
    """What makes this node fail or never finish, with its settings and bindings.

    ``known`` tells whether a finding key was already reported for the machine alone
    (those are not repeated per node).
    """
    # The node's own limits: counted unit by unit where that is cheap, so a finding
    # holds at these limits, not only at some.
    explorer = Explorer(machines, node_triggers(node, machines), exact_space=EXACT_SPACE)
    assumption = Assumption(node.settings)
    found: list[_Found] = []
    _walk(explorer, node.machine, assumption, "", "", found, set())
    results = []
    for key, finding in _shortest(found).items():
        if known(key):
            continue
        text = f"node {node.id!r}, with its settings and bindings: {finding.message}"
        results.append(
            Finding(
                severity=finding.severity,
                code=finding.code,
                message=text,
                location=node.location,
            )
        )
    return results


def _walk(
    explorer: Explorer,
    name: str,
    assumption: Assumption,
    prefix: str,
    lead: str,
    found: list[_Found],
    stack: set[str],
) -> None:
    if name in stack:
        return
    space = explorer.explore(name, assumption)
    found.extend(_gap_findings(space, prefix, lead))
    found.extend(_liveness_findings(space, prefix, lead))
    found.extend(_cycle_findings(space, prefix, lead))
    found.extend(_bounded(space))
    entered: dict[str, Config] = {}
    for config in space.parent:
        if space.machine.states[config.state].machine is not None:
            entered.setdefault(config.state, config)
    for state, config in entered.items():
        child = space.machine.states[state].machine
        if child is None:
            continue
        into = lead + space.trace_text(config, prefix) + " > "
        _walk(explorer, child, assumption, f"{prefix}{state}/", into, found, stack | {name})


def edge_marks(machines: Mapping[str, MachineDef]) -> dict[tuple[str, int], str]:
    """(machine, transition index) → ``dead`` or ``shadowed``, for every machine given.

    Machines whose guards name undeclared budgets are skipped (they cannot be explored).
    """
    explorer = Explorer(machines)
    marks: dict[tuple[str, int], str] = {}
    for machine in machines.values():
        named = {
            p.partition(":")[2]
            for t in machine.transitions
            for p in (*t.conditions, *t.unless)
            if p.startswith("budget:")
        }
        if not named <= set(machine.budgets):
            continue
        for key, finding in machine_proofs(explorer, machine, ()).findings.items():
            if key[0] == "edge":
                kind = "dead" if finding.code is Code.DEAD_TRANSITION else "shadowed"
                marks[(machine.name, int(key[2]))] = kind
    return marks
