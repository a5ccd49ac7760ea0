"""A machine's examples: the behaviours its author intends, run on the machine itself.

A machine file may list ``examples:``, each a path from the initial state (here, of
the built-in ``quality_loop``)::

    - name: a failed verification is reflected on, then passes
      steps: [done -> verify, fail -> reflect, retry -> execute, done -> verify,
              pass -> completed]
      outcome: success
      spent: {think: 2, verify: 2, reflect: 1}

Each step fires its trigger (with the ``payload`` its guards read; ``times: N`` repeats a
step written as a mapping) through the engine's own stepping,
:class:`phasegraph.core.MachineSet`, as a run does: guards, budget limits
(the example's ``with: {budgets: ...}`` overrides them as a node's settings do), spends,
nested machines and final states. The example holds when every step enters the state it
names, the node then ends with ``outcome`` (or has not ended, when ``outcome`` is
omitted) and the budgets are spent as ``spent`` says. ``phasegraph test`` runs them;
the mutation tests run the examples of a machine against its mutants, through
:func:`run_examples` too.

What the examples show is counted as :class:`Goal` s (:func:`goals`, :func:`coverage`):
each transition from each of its source states (a transition from ``[main, retry]``
taken only from ``main`` leaves a failure handler of ``retry`` untested), and each
budget run out at its default limit (a step the budget decides, fired with no units left
under no ``with: {budgets: ...}`` override for it: :func:`ran_out`), so that a limit off
by one changes what an example sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.analysis._explore import fireable
from phasegraph.core._machine import MachineSet, Position, StepResult, compile_machines
from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError, SourceLocation
from phasegraph.model import EMPTY, PATH_SEPARATOR, BudgetDef, MachineDef, TransitionDef
from phasegraph.spec._machines import read_machine
from phasegraph.spec._models import step_parts, step_times

__all__ = [
    "Example",
    "ExampleResult",
    "ExampleStep",
    "Goal",
    "coverage",
    "fired_by",
    "goals",
    "machine_examples",
    "ran_out",
    "run_examples",
]

_NODE = "example"


@dataclass(frozen=True, slots=True, order=True)
class Goal:
    """Something an example can show: a transition taken from a source, or a budget run out.

    A budget is run out at its default limit (see :func:`ran_out`).

    Attributes:
        machine: The machine it belongs to.
        transition: The transition's index in the machine's transitions (``-1``: a budget).
        name: The source state the transition is taken from, or the budget's name.
    """

    machine: str
    transition: int
    name: str

    @property
    def budget(self) -> bool:
        """Whether this is a budget run out (else a transition taken from a source)."""
        return self.transition < 0

    def describe(self, machines: Mapping[str, MachineDef]) -> str:
        """``FILE:LINE: no example of 'M' takes ...`` (what is missing, in words)."""
        machine = machines[self.machine]
        if self.budget:
            budget = machine.budgets[self.name]
            where = f"{machine.location}: " if machine.location else ""
            return (
                f"{where}no example of {self.machine!r} runs budget {self.name!r} out at its "
                f"default limit {budget.limit} (a step with no units left, no `with: "
                f"{{budgets: ...}}` for it)"
            )
        transition = machine.transitions[self.transition]
        where = f"{transition.location}: " if transition.location else ""
        text = (
            f"{where}no example of {self.machine!r} takes transition {self.transition} "
            f"`{transition.trigger}` {','.join(transition.source)} -> {transition.dest}"
        )
        return text + (f" from {self.name}" if len(transition.source) > 1 else "")


def goals(machine: MachineDef, machines: Mapping[str, MachineDef] = EMPTY) -> list[Goal]:
    """Every goal of ``machine``: each transition from each source, each spent budget.

    A transition no run can take from a source (``phasegraph check``'s exploration of
    ``machines``, the machine's family, finds none under any setting, limit or payload)
    is not a goal from it; a budget spent on no state (``tokens``, spent by actions)
    cannot be run out by stepping, and is not a goal either.
    """
    possible = fireable(machine.name, {**machines, machine.name: machine})
    found = [
        Goal(machine.name, index, source)
        for index, transition in enumerate(machine.transitions)
        for source in transition.source
        if possible is None or (index, source) in possible
    ]
    found += [Goal(machine.name, -1, b.name) for b in machine.budgets.values() if b.spend_on]
    return found


@dataclass(frozen=True, slots=True)
class ExampleStep:
    """One step: the trigger fired, the payload its guards read, the state path entered."""

    trigger: str
    to: str
    payload: Mapping[str, bool] = field(default_factory=dict)
    location: SourceLocation | None = None


@dataclass(frozen=True, slots=True)
class Example:
    """One declared behaviour of a machine.

    Attributes:
        machine: The machine it belongs to (it starts in that machine's initial state).
        name: What it shows, in words.
        steps: The steps, in order.
        outcome: How the node ends after the last step; ``None``: it has not ended.
        spent: Units spent per budget after the last step, when stated.
        settings: The node's settings the guards read.
        location: Where it is declared.
    """

    machine: str
    name: str
    steps: tuple[ExampleStep, ...]
    outcome: str | None = None
    spent: Mapping[str, int] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    location: SourceLocation | None = None

    def label(self) -> str:
        """``FILE:LINE: example 'NAME' of machine M``."""
        where = f"{self.location}: " if self.location else ""
        return f"{where}example {self.name!r} of machine {self.machine!r}"


@dataclass(frozen=True, slots=True)
class ExampleResult:
    """What running one example showed.

    Attributes:
        example: The example.
        failure: Why it does not hold (expected against actual), or ``None``.
        fired: What the example showed: each transition it took (from its source) and each
            budget it ran out.
    """

    example: Example
    failure: str | None
    fired: tuple[Goal, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the machine behaves as the example says."""
        return self.failure is None


def machine_examples(machine: MachineDef) -> tuple[Example, ...]:
    """The examples declared in ``machine``'s file (none when it has no sound file)."""
    path = Path(machine.location.path) if machine.location else None
    if path is None or not path.is_file():
        return ()
    found, problems = read_machine(path)
    if found is None or problems:
        return ()  # `phasegraph check` reports the problems
    examples = []
    for index, spec in enumerate(found.spec.examples):
        steps = []
        for position, step in enumerate(spec.steps):
            trigger, payload, to = step_parts(step)
            where = found.doc.at(("examples", index, "steps", position))
            one = ExampleStep(trigger, to, MappingProxyType(payload), where)
            steps += [one] * step_times(step)
        examples.append(
            Example(
                machine=found.name,
                name=spec.name,
                steps=tuple(steps),
                outcome=spec.outcome,
                spent=None if spec.spent is None else MappingProxyType(dict(spec.spent)),
                settings=MappingProxyType(dict(spec.settings)),
                location=found.doc.at(("examples", index)),
            )
        )
    return tuple(examples)


def run_examples(
    examples: Iterable[Example], machines: Mapping[str, MachineDef]
) -> Iterator[ExampleResult]:
    """Run each example on the machines by name (each example's machine and those it nests).

    The machines are compiled once for all the examples; each result is yielded as soon
    as it is known, so a caller that needs only the first failure stops there.
    """
    compiled = compile_machines(machines)
    for example in examples:
        yield _run(example, compiled)


def coverage(
    machines: Mapping[str, MachineDef],
    results: Iterable[ExampleResult],
    family: Mapping[str, MachineDef] = EMPTY,
) -> list[Goal]:
    """The goals of ``machines`` no example shows, in declaration order.

    ``family``: the machines they nest, when ``machines`` does not hold them.
    """
    fired = {goal for result in results for goal in result.fired}
    every = {**family, **machines}
    return [g for m in machines.values() for g in goals(m, every) if g not in fired]


def ran_out(
    machines: MachineSet,
    root: str,
    position: Position,
    settings: Mapping[str, Any],
    fired: list[Goal] | None = None,
) -> list[Goal]:
    """The budgets a step fired at ``position`` runs out at their default limits.

    A budget with no units left (and no ``with: {budgets: ...}`` override) that decides
    the step: the step moves its level (``fired``, innermost level first, as
    :func:`fired_by` gives them) on a trigger for which a transition from the state
    reads it (a ``budget:`` guard, or a destination that spends it: the engine skips a
    transition into a state whose budget is spent). A budget nothing decides on can only
    be reached: reaching its limit is what an example shows of it (``fired`` ``None``:
    after the last step).
    """
    overridden = settings.get("budgets") or EMPTY
    found = []
    path = position.path
    for depth, machine in enumerate(machines.levels(root, path)):
        prefix = "".join(p + PATH_SEPARATOR for p in path[:depth])
        definition = machine.definition
        moved = len(path) - 1 - depth  # this level's move among ``fired``
        trigger = None
        if fired is not None and moved < len(fired):
            trigger = definition.transitions[fired[moved].transition].trigger
        for budget in definition.budgets.values():
            if not budget.spend_on or budget.name in overridden:
                continue
            if position.counters.get(prefix + budget.name, 0) < budget.limit:
                continue
            read = [t for t in definition.transitions if _decides(budget, t)]
            if read and not any(t.trigger == trigger and path[depth] in t.source for t in read):
                continue
            found.append(Goal(definition.name, -1, budget.name))
    return found


def _decides(budget: BudgetDef, transition: TransitionDef) -> bool:
    """Whether ``budget`` has units left decides if ``transition`` is taken."""
    guard = f"budget:{budget.name}"
    return guard in (*transition.conditions, *transition.unless) or (
        transition.dest in budget.spend_on
    )


def _path(result: StepResult | Position) -> str:
    position = result.position if isinstance(result, StepResult) else result
    return PATH_SEPARATOR.join(position.path)


def _where(result: StepResult) -> str:
    ended = "" if result.outcome is None else f" (ended {result.outcome})"
    return _path(result) + ended


def _run(example: Example, machines: MachineSet) -> ExampleResult:
    settings = MappingProxyType(dict(example.settings))
    root = example.machine
    expected = [machines[root].definition.initial]
    actual = list(expected)
    fired: list[Goal] = []

    def failed(why: str, step: ExampleStep | None = None) -> ExampleResult:
        at = f" (at {step.location})" if step is not None and step.location else ""
        lines = [
            f"{example.label()}: {why}{at}",
            f"  expected: {_joined(expected)}",
            f"  actual:   {_joined(actual)}",
        ]
        return ExampleResult(example, "\n".join(lines), tuple(fired))

    try:
        result = machines.start(root, _NODE, settings)
    except BudgetExhaustedError as exc:
        actual[0] = "refused"
        return failed(f"the node cannot start: {exc}")
    actual[0] = expected[0] = _where(result)
    for number, step in enumerate(example.steps, start=1):
        expected.append(f"--{step.trigger}--> {step.to}")
        if result.outcome is not None:
            actual.append("(none: the node has ended)")
            return failed(f"step {number} fires {step.trigger!r} after the node ended", step)
        taken = fired_by(machines, root, result.position, step.trigger, step.payload, settings)
        fired += ran_out(machines, root, result.position, settings, taken) + taken
        try:
            result = machines.step(
                root,
                result.position,
                step.trigger,
                node_id=_NODE,
                settings=settings,
                payload=step.payload,
            )
        except (IllegalTriggerError, BudgetExhaustedError) as exc:
            actual.append(f"--{step.trigger}--> refused")
            return failed(f"step {number}: {exc}", step)
        actual.append(f"--{step.trigger}--> {_where(result)}")
        if _path(result) != step.to:
            return failed(f"step {number} enters {_path(result)!r}, not {step.to!r}", step)
    if example.outcome is not None:
        expected[-1] += f" (ended {example.outcome})"
    fired += ran_out(machines, root, result.position, settings)
    why = _ending(example, result)
    return ExampleResult(example, None, tuple(fired)) if why is None else failed(why)


def _joined(path: list[str]) -> str:
    """The path in words, a step repeated in a row written once with how often."""
    words: list[str] = []
    repeated = 1
    for index, word in enumerate(path):
        if index + 1 < len(path) and path[index + 1] == word:
            repeated += 1
            continue
        words.append(word if repeated == 1 else f"{word} (x{repeated})")
        repeated = 1
    return " ".join(words)


def _ending(example: Example, result: StepResult) -> str | None:
    """What is wrong with how the node stands after the last step, if anything."""
    outcome = None if result.outcome is None else str(result.outcome)
    if outcome != example.outcome:
        said = "not to end yet" if example.outcome is None else f"to end {example.outcome}"
        done = "has not ended" if outcome is None else f"ended {outcome}"
        return f"the node was expected {said}, but it {done}"
    counters = result.position.counters
    wrong = {
        name: counters.get(name, 0)
        for name, units in (example.spent or {}).items()
        if counters.get(name, 0) != units
    }
    if wrong and example.spent is not None:
        said = ", ".join(f"{n} {example.spent[n]}" for n in wrong)
        got = ", ".join(f"{n} {units}" for n, units in wrong.items())
        return f"expected spent {said}, but spent {got}"
    return None


def fired_by(
    machines: MachineSet,
    root: str,
    position: Position,
    trigger: str,
    payload: Mapping[str, bool],
    settings: Mapping[str, Any],
) -> list[Goal]:
    """The transitions a step takes (each from its source), read with the step's routing.

    The innermost level's, and each level's a finished nested machine hands its outcome to.
    """
    path = position.path
    levels = machines.levels(root, path)
    taken: list[Goal] = []
    given: Mapping[str, Any] = payload
    for depth in range(len(path) - 1, -1, -1):
        machine, state = levels[depth], path[depth]
        prefix = "".join(p + PATH_SEPARATOR for p in path[:depth])
        counters = {
            k[len(prefix) :]: v for k, v in position.counters.items() if k.startswith(prefix)
        }
        chosen = machine.choose(
            state,
            trigger,
            counters=counters,
            limits=machine.limits(settings),
            payload=given,
            settings=settings,
        )
        if chosen is None:
            break
        definition = machine.definition
        candidates = [
            i
            for i, t in enumerate(definition.transitions)
            if t.trigger == trigger and state in t.source
        ]
        taken.append(Goal(definition.name, candidates[chosen[0]], state))
        entered = definition.states[chosen[1]].final
        if entered is None or depth == 0:
            break
        trigger, given = str(entered), EMPTY  # the nested machine ended: its parent moves on
    return taken
