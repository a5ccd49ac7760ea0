"""A machine's examples: the behaviours its author intends, run on the machine itself.

A machine file may list ``examples:``, each a path from the initial state (here, of
the built-in ``quality_loop``)::

    - name: a failed verification is reflected on, then passes
      steps: [done -> verify, fail -> reflect, retry -> execute, done -> verify,
              pass -> completed]
      outcome: success
      spent: {think: 2, verify: 2, reflect: 1}

Each step fires its trigger (with the ``payload`` its guards read) through the engine's
own stepping, :class:`phasegraph.core.MachineSet`, as a run does: guards, budget limits
(the example's ``with: {budgets: ...}`` overrides them as a node's settings do), spends,
nested machines and final states. The example holds when every step enters the state it
names, the node then ends with ``outcome`` (or has not ended, when ``outcome`` is
omitted) and the budgets are spent as ``spent`` says. ``phasegraph test`` runs them;
the mutation tests run the examples of a machine against its mutants, through
:func:`run_examples` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.core._machine import MachineSet, Position, StepResult, compile_machines
from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError, SourceLocation
from phasegraph.model import EMPTY, PATH_SEPARATOR, MachineDef
from phasegraph.spec._machines import read_machine
from phasegraph.spec._models import step_parts

__all__ = [
    "Example",
    "ExampleResult",
    "ExampleStep",
    "coverage",
    "fired_by",
    "machine_examples",
    "run_examples",
]

_NODE = "example"


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
        fired: Each transition the example took, as (machine, index in its transitions).
    """

    example: Example
    failure: str | None
    fired: tuple[tuple[str, int], ...] = ()

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
            steps.append(ExampleStep(trigger, to, MappingProxyType(payload), where))
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
    machines: Mapping[str, MachineDef], results: Iterable[ExampleResult]
) -> dict[str, list[int]]:
    """The transitions no example takes, per machine (index in its transitions)."""
    fired = {pair for result in results for pair in result.fired}
    return {
        name: missed
        for name, machine in machines.items()
        if (missed := [i for i in range(len(machine.transitions)) if (name, i) not in fired])
    }


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
    fired: list[tuple[str, int]] = []

    def failed(why: str, step: ExampleStep | None = None) -> ExampleResult:
        at = f" (at {step.location})" if step is not None and step.location else ""
        lines = [
            f"{example.label()}: {why}{at}",
            f"  expected: {' '.join(expected)}",
            f"  actual:   {' '.join(actual)}",
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
        fired += fired_by(machines, root, result.position, step.trigger, step.payload, settings)
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
    why = _ending(example, result)
    return ExampleResult(example, None, tuple(fired)) if why is None else failed(why)


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
) -> list[tuple[str, int]]:
    """The transitions a step takes, read with the routing the step uses.

    The innermost level's, and each level's a finished nested machine hands its outcome to.
    """
    path = position.path
    levels = machines.levels(root, path)
    taken: list[tuple[str, int]] = []
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
        taken.append((definition.name, candidates[chosen[0]]))
        entered = definition.states[chosen[1]].final
        if entered is None or depth == 0:
            break
        trigger, given = str(entered), EMPTY  # the nested machine ended: its parent moves on
    return taken
