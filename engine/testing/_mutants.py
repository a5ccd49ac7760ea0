"""Mutants of machines and graphs: small changes a real author could make by mistake.

Each operator makes one change to one machine:

=========================  ==========================================================
operator                   change
=========================  ==========================================================
``drop-transition``        a transition is removed
``delete-error-handler``   a transition handling a failure is removed (its trigger is
                           ``error`` or ``timeout``, or it ends the node unsuccessfully)
``redirect-transition``    a transition leads to another state
``flip-guard``             one guard moves between ``conditions`` and ``unless``
``flip-outcome``           a final state's outcome turns success to failed, or any
                           other outcome to success
``make-non-final``         a final state is no longer final
``move-spend``             a budget is spent on entering another non-final state
``limit-off-by-one``       a budget's default limit is one more, or one less
``drop-source``            one source state of a multi-source transition is dropped
``swap-priority``          two transitions of one trigger from a common state swap
                           places (the first whose guards hold wins)
``other-outcome``          a final state's outcome turns to another failure kind
                           (``failed``, ``gave_up``, ``parked``)
``retrigger``              a transition fires on another trigger its sources take
=========================  ==========================================================

The last five are not the project's own first set: they change what an author's
typo or reordering changes (a limit, a list of sources, the order of two lines, an
outcome's kind, a trigger's name).

A mutant of a graph is a mutant of one machine its nodes use (nested ones included),
in place in the graph, so each node's settings and bindings apply to it.
:func:`check_kills` says whether ``phasegraph check --strict`` fails on a mutant,
:func:`examples_kill` whether ``phasegraph test`` does: whether an example the original
machines declare (``examples:``, their author's intent) fails on it, run by the same
runner as ``phasegraph test`` (:mod:`phasegraph.testing._examples`). :func:`equivalent`
says why a mutant behaves exactly as the original does (nothing could kill it), when
that can be shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.analysis import Severity
from phasegraph.analysis._check import analyze_graph, analyze_machine
from phasegraph.analysis._explore import fireable
from phasegraph.model import (
    GraphDef,
    MachineDef,
    NodeOutcome,
    TransitionDef,
    nested_machines,
    replace,
)
from phasegraph.testing._examples import Example, machine_examples, run_examples

__all__ = [
    "OPERATORS",
    "Mutant",
    "Verdict",
    "check_kills",
    "equivalent",
    "examples_kill",
    "graph_mutants",
    "kill_table",
    "machine_mutants",
    "machine_text",
    "shipped_verdicts",
]

OPERATORS = (
    "drop-transition",
    "delete-error-handler",
    "redirect-transition",
    "flip-guard",
    "flip-outcome",
    "make-non-final",
    "move-spend",
    "limit-off-by-one",
    "drop-source",
    "swap-priority",
    "other-outcome",
    "retrigger",
)
"""Every mutation operator, in the order mutants are generated."""


@dataclass(frozen=True, slots=True)
class Mutant:
    """One machine changed in one place.

    Attributes:
        subject: The machine or graph mutated (a graph's mutants change a machine it uses).
        operator: One of :data:`OPERATORS`.
        change: The change, in words; unique within the subject.
        machine: The mutated machine.
        original: The machine before the change.
        transition: The index of the transition changed, for the transition operators.
        graph: For a graph's mutant, the graph with the mutated machine in place.
        family: For a machine's mutant, the original machines by name (those it nests),
            when known.
    """

    subject: str
    operator: str
    change: str
    machine: MachineDef
    original: MachineDef
    transition: int | None = None
    graph: GraphDef | None = None
    family: Mapping[str, MachineDef] | None = None

    @property
    def key(self) -> str:
        """``subject: change``, unique over every mutant generated."""
        return f"{self.subject}: {self.change}"


def _edge(index: int, transition: TransitionDef) -> str:
    sources = ",".join(transition.source)
    return f"transition {index} `{transition.trigger}` {sources} -> {transition.dest}"


def _handles_failure(machine: MachineDef, transition: TransitionDef) -> bool:
    dest = machine.states.get(transition.dest)
    ends_badly = dest is not None and dest.final not in (None, NodeOutcome.SUCCESS)
    return transition.trigger in {ERROR_TRIGGER, TIMEOUT_TRIGGER} or ends_badly


_Change = tuple[str, str, MachineDef, int | None]
"""operator, change in words, mutated machine, index of the transition changed"""


def machine_mutants(
    machine: MachineDef,
    subject: str | None = None,
    family: Mapping[str, MachineDef] | None = None,
) -> Iterator[Mutant]:
    """Every mutant of ``machine`` the operators make, named under ``subject``.

    ``family``: every original machine by name (those ``machine`` nests), when known.
    """
    subject = subject or machine.name
    prefix = "" if subject == machine.name else f"{machine.name}: "
    makers = (
        _drops,
        _redirects,
        _flipped_guards,
        _flipped_outcomes,
        _moved_spends,
        _limits,
        _dropped_sources,
        _swapped,
        _other_outcomes,
        _retriggered,
    )
    for make in makers:
        for operator, change, mutated, index in make(machine):
            yield Mutant(subject, operator, prefix + change, mutated, machine, index, family=family)


def _with_transition(machine: MachineDef, index: int, new: TransitionDef | None) -> MachineDef:
    before, after = machine.transitions[:index], machine.transitions[index + 1 :]
    return replace(machine, transitions=(*before, *([new] if new else []), *after))


def _drops(machine: MachineDef) -> Iterator[_Change]:
    for index, transition in enumerate(machine.transitions):
        failure = _handles_failure(machine, transition)
        operator = "delete-error-handler" if failure else "drop-transition"
        change = f"drop {_edge(index, transition)}"
        yield operator, change, _with_transition(machine, index, None), index


def _redirects(machine: MachineDef) -> Iterator[_Change]:
    for index, transition in enumerate(machine.transitions):
        for dest in machine.states:
            if dest != transition.dest:
                moved = _with_transition(machine, index, replace(transition, dest=dest))
                change = f"redirect {_edge(index, transition)} to {dest}"
                yield "redirect-transition", change, moved, index


def _flipped_guards(machine: MachineDef) -> Iterator[_Change]:
    for index, transition in enumerate(machine.transitions):
        conditions, unless = transition.conditions, transition.unless
        for predicate in (*conditions, *unless):
            if predicate in conditions:
                flipped = replace(
                    transition,
                    conditions=tuple(p for p in conditions if p != predicate),
                    unless=(*unless, predicate),
                )
            else:
                flipped = replace(
                    transition,
                    conditions=(*conditions, predicate),
                    unless=tuple(p for p in unless if p != predicate),
                )
            change = f"flip guard {predicate} of {_edge(index, transition)}"
            yield "flip-guard", change, _with_transition(machine, index, flipped), index


def _flipped_outcomes(machine: MachineDef) -> Iterator[_Change]:
    """Outcomes flipped, then final states made non-final."""
    finals = [state for state in machine.states.values() if state.final is not None]
    for state in finals:
        outcome = NodeOutcome.FAILED if state.final is NodeOutcome.SUCCESS else NodeOutcome.SUCCESS
        states = {**machine.states, state.name: replace(state, final=outcome)}
        change = f"final state {state.name} ends {outcome} instead of {state.final}"
        yield "flip-outcome", change, replace(machine, states=states), None
    for state in finals:
        states = {**machine.states, state.name: replace(state, final=None)}
        change = f"state {state.name} is not final"
        yield "make-non-final", change, replace(machine, states=states), None


def _moved_spends(machine: MachineDef) -> Iterator[_Change]:
    for budget in machine.budgets.values():
        for spent in budget.spend_on:
            for other in machine.states.values():
                if other.final is not None or other.name in budget.spend_on:
                    continue
                spend_on = tuple(other.name if s == spent else s for s in budget.spend_on)
                budgets = {**machine.budgets, budget.name: replace(budget, spend_on=spend_on)}
                change = f"budget {budget.name} spent on {other.name} instead of {spent}"
                yield "move-spend", change, replace(machine, budgets=budgets), None


def _limits(machine: MachineDef) -> Iterator[_Change]:
    for budget in machine.budgets.values():
        for limit in (budget.limit + 1, budget.limit - 1):
            if limit < 0:
                continue
            budgets = {**machine.budgets, budget.name: replace(budget, limit=limit)}
            change = f"budget {budget.name} limit {limit} instead of {budget.limit}"
            yield "limit-off-by-one", change, replace(machine, budgets=budgets), None


def _dropped_sources(machine: MachineDef) -> Iterator[_Change]:
    for index, transition in enumerate(machine.transitions):
        if len(transition.source) < 2:
            continue
        for source in transition.source:
            kept = tuple(s for s in transition.source if s != source)
            narrowed = _with_transition(machine, index, replace(transition, source=kept))
            change = f"drop source {source} of {_edge(index, transition)}"
            yield "drop-source", change, narrowed, index


def _swapped(machine: MachineDef) -> Iterator[_Change]:
    """Each transition swapped with the next of its trigger that shares a source with it."""
    transitions = machine.transitions
    for index, first in enumerate(transitions):
        later = next(
            (
                j
                for j in range(index + 1, len(transitions))
                if transitions[j].trigger == first.trigger
                and set(transitions[j].source) & set(first.source)
            ),
            None,
        )
        if later is None:
            continue
        order = list(transitions)
        order[index], order[later] = order[later], order[index]
        change = f"swap {_edge(index, first)} with transition {later}"
        yield "swap-priority", change, replace(machine, transitions=tuple(order)), index


_FAILURES = (NodeOutcome.FAILED, NodeOutcome.GAVE_UP, NodeOutcome.PARKED)


def _other_outcomes(machine: MachineDef) -> Iterator[_Change]:
    """A failure's kind changed (flip-outcome already turns success and failure round)."""
    for state in machine.states.values():
        if state.final is None or state.final is NodeOutcome.SUCCESS:
            continue
        for outcome in _FAILURES:
            if outcome is state.final or (outcome is NodeOutcome.FAILED):
                continue
            states = {**machine.states, state.name: replace(state, final=outcome)}
            change = f"final state {state.name} ends {outcome} instead of {state.final}"
            yield "other-outcome", change, replace(machine, states=states), None


def _retriggered(machine: MachineDef) -> Iterator[_Change]:
    """A transition fires on another trigger its source states take (two lines mixed up)."""
    taken: dict[str, set[str]] = {}
    for transition in machine.transitions:
        for source in transition.source:
            taken.setdefault(source, set()).add(transition.trigger)
    for index, transition in enumerate(machine.transitions):
        others = {t for source in transition.source for t in taken[source]}
        for trigger in sorted(others - {transition.trigger}):
            moved = _with_transition(machine, index, replace(transition, trigger=trigger))
            change = f"{_edge(index, transition)} fires on {trigger}"
            yield "retrigger", change, moved, index


def graph_mutants(definition: GraphDef) -> Iterator[Mutant]:
    """Every mutant of every machine ``definition``'s nodes use, in place in the graph."""
    used: dict[str, MachineDef] = {}
    for node in definition.nodes:
        for machine in nested_machines(node.machine, definition.machines):
            used.setdefault(machine.name, machine)
    for machine in used.values():
        for mutant in machine_mutants(machine, definition.name):
            machines = {**definition.machines, machine.name: mutant.machine}
            yield replace_graph(mutant, replace(definition, machines=machines))


def replace_graph(mutant: Mutant, graph: GraphDef) -> Mutant:
    """``mutant`` placed in ``graph``."""
    return Mutant(
        mutant.subject,
        mutant.operator,
        mutant.change,
        mutant.machine,
        mutant.original,
        mutant.transition,
        graph,
    )


def check_kills(mutant: Mutant, machines: Mapping[str, MachineDef]) -> bool:
    """Whether ``phasegraph check --strict`` fails on the mutant (an error or a warning).

    Args:
        mutant: The mutant.
        machines: Every machine by name, for a machine's mutant (its nested ones).
    """
    if mutant.graph is not None:
        if _refused_by_loader(mutant.graph):
            return True
        findings = analyze_graph(mutant.graph)
    else:
        family = {**machines, mutant.machine.name: mutant.machine}
        findings = analyze_machine(mutant.machine.name, family)
    return any(f.severity in (Severity.ERROR, Severity.WARNING) for f in findings)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What kills one mutant.

    Attributes:
        mutant: The mutant.
        by_check: ``phasegraph check --strict`` fails on it.
        by_examples: An example of the original machines fails on it (``phasegraph test``).
    """

    mutant: Mutant
    by_check: bool
    by_examples: bool

    @property
    def killed(self) -> bool:
        """Whether ``check --strict`` or ``phasegraph test`` fails on the mutant."""
        return self.by_check or self.by_examples


def shipped_verdicts() -> dict[str, list[Verdict]]:
    """Every mutant of the shipped machines (each on its own) and graphs, and its verdict."""
    from phasegraph.spec import load_graph
    from phasegraph.spec._loader import builtin_graphs, builtin_machines, load_machine_family

    found: dict[str, list[Verdict]] = {"machines": [], "graphs": []}
    for name in builtin_machines():
        root, family = load_machine_family(name)
        examples = [e for machine in family.values() for e in machine_examples(machine)]
        for mutant in machine_mutants(root, family=family):
            killed = check_kills(mutant, family), examples_kill(mutant, examples, family)
            found["machines"].append(Verdict(mutant, *killed))
    for name in builtin_graphs():
        graph = load_graph(name)
        examples = [e for machine in graph.machines.values() for e in machine_examples(machine)]
        for mutant in graph_mutants(graph):
            killed = check_kills(mutant, {}), examples_kill(mutant, examples, graph.machines)
            found["graphs"].append(Verdict(mutant, *killed))
    return found


def kill_table(verdicts: Iterable[Verdict]) -> str:
    """The kill rates per operator, as text.

    Columns: the mutants, those ``check --strict`` spares that :func:`equivalent`
    recognises, and of the others those killed by ``check --strict`` and by ``check
    --strict`` or ``phasegraph test``.
    """
    rows = {op: [0, 0, 0, 0] for op in OPERATORS}
    for verdict in verdicts:
        row = rows[verdict.mutant.operator]
        same = not verdict.by_check and equivalent(verdict.mutant) is not None
        row[0] += 1
        row[1] += int(same)
        row[2] += int(not same and verdict.by_check)
        row[3] += int(not same and verdict.killed)
    lines = [f"{'operator':<22}{'mutants':>8}{'equivalent':>12}{'check':>8}{'check|test':>12}"]
    lines += [f"{op:<22}{a:>8}{b:>12}{c:>8}{d:>12}" for op, (a, b, c, d) in rows.items()]
    total, alike, check, either = (sum(r[i] for r in rows.values()) for i in range(4))
    lines.append(f"{'all':<22}{total:>8}{alike:>12}{check:>8}{either:>12}")
    live = total - alike
    lines.append(
        f"killed of the {live} not equivalent: check {check} ({check / live:.1%}), "
        f"check or test {either} ({either / live:.1%})"
    )
    return "\n".join(lines)


def examples_kill(
    mutant: Mutant, examples: Iterable[Example], machines: Mapping[str, MachineDef]
) -> bool:
    """Whether an example of the original machines fails on the mutant (``phasegraph test``).

    Args:
        mutant: The mutant.
        examples: The examples the original machines declare.
        machines: Every original machine by name (the mutated one is swapped in).
    """
    name = mutant.machine.name
    swapped = {**machines, name: mutant.machine}
    used: dict[str, MachineDef] = {}
    relevant = []
    for example in examples:
        family = {m.name: m for m in nested_machines(example.machine, swapped)}
        if name in family:  # only examples that step through the mutated machine
            relevant.append(example)
            used.update(family)
    return not all(result.ok for result in run_examples(relevant, used))


def _refused_by_loader(graph: GraphDef) -> bool:
    """Whether a bound action declares a trigger its state does not accept.

    The loader refuses such a graph (``trigger-not-accepted``), before any analysis.
    """
    for node in graph.nodes:
        for machine in nested_machines(node.machine, graph.machines):
            legal: dict[str, set[str]] = {}
            for transition in machine.transitions:
                for source in transition.source:
                    legal.setdefault(source, set()).add(transition.trigger)
            for state in machine.states.values():
                action = node.bind.get(state.hook or "")
                if action is not None and not set(action.triggers) <= legal.get(state.name, set()):
                    return True
    return False


def equivalent(mutant: Mutant) -> str | None:
    """Why the mutant behaves exactly as the original, or ``None`` when it may not.

    Three reasons are recognised: a transition redirected from one final state to another
    with the same outcome (the node ends the same way; only the state's name in the
    history differs); a source dropped from a transition that no run takes from it
    (``phasegraph check``'s exploration, under every setting, limit and payload); two
    transitions swapped whose guards never hold together (one requires what the other
    excludes), so at most one of them is ever open.
    """
    if mutant.transition is None:
        return None
    if mutant.operator == "redirect-transition":
        return _same_end(mutant, mutant.transition)
    if mutant.operator == "drop-source":
        return _never_from(mutant, mutant.transition)
    if mutant.operator == "swap-priority":
        return _exclusive(mutant, mutant.transition)
    return None


def _same_end(mutant: Mutant, index: int) -> str | None:
    before = mutant.original.transitions[index].dest
    after = mutant.machine.transitions[index].dest
    ended, ends = mutant.original.states[before].final, mutant.original.states[after].final
    if ended is None or ended != ends:
        return None
    return f"{before} and {after} are both final with outcome {ended}: the node ends the same way"


def _never_from(mutant: Mutant, index: int) -> str | None:
    original = mutant.original
    if mutant.graph is not None:
        machines = dict(mutant.graph.machines)
    else:
        machines = dict(mutant.family or {})
    machines[original.name] = original
    if any(s.machine and s.machine not in machines for s in original.states.values()):
        return None  # its nested machines are unknown here: nothing is proved
    (dropped,) = set(original.transitions[index].source) - set(
        mutant.machine.transitions[index].source
    )
    possible = fireable(original.name, machines)
    if possible is None or (index, dropped) in possible:
        return None
    return (
        f"no run takes transition {index} from {dropped} (under any setting, limit or "
        "payload): dropping that source changes nothing"
    )


def _exclusive(mutant: Mutant, index: int) -> str | None:
    first = mutant.original.transitions[index]
    other = next(
        t
        for position, t in enumerate(mutant.original.transitions)
        if t is not first and mutant.machine.transitions[index] is t
    )
    clash = sorted(
        (set(first.conditions) & set(other.unless)) | (set(first.unless) & set(other.conditions))
    )
    if not clash:
        return None
    return (
        f"transitions {index} and the one it is swapped with never hold together ({clash[0]} "
        "is required by one and excluded by the other): their order changes nothing"
    )


def machine_text(machine: MachineDef, examples: Iterable[Example] = ()) -> str:
    """The machine as a machine file, for the command line, with ``examples`` declared."""
    document: dict[str, Any] = {
        "machine": machine.name,
        "initial": machine.initial,
        "budgets": {
            b.name: {"limit": b.limit, "spend_on": list(b.spend_on)}
            for b in machine.budgets.values()
        },
        "states": {
            state.name: {
                key: str(value)
                for key, value in (
                    ("final", state.final),
                    ("hook", state.hook),
                    ("machine", state.machine),
                    ("retries", state.retries),
                )
                if value is not None
            }
            for state in machine.states.values()
        },
        "transitions": [
            {
                "trigger": t.trigger,
                "source": list(t.source),
                "dest": t.dest,
                "conditions": list(t.conditions),
                "unless": list(t.unless),
            }
            for t in machine.transitions
        ],
        "examples": [
            {
                "name": example.name,
                "with": dict(example.settings),
                "steps": [
                    {"trigger": step.trigger, "payload": dict(step.payload), "to": step.to}
                    for step in example.steps
                ],
                **({"outcome": example.outcome} if example.outcome else {}),
                **({"spent": dict(example.spent)} if example.spent is not None else {}),
            }
            for example in examples
        ],
    }
    # One top-level key a line, each value in flow style (JSON is YAML's flow style).
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in document.items())


if __name__ == "__main__":  # python -m phasegraph.testing._mutants: the kill rates
    for kind, found in shipped_verdicts().items():
        print(f"{kind}:\n{kill_table(found)}\n")
