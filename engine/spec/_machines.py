"""Machine files: read, checked, converted, and resolved by name across one load.

A machine file is read with :mod:`phasegraph.spec._yaml`, checked with
:mod:`phasegraph.spec._schema` and converted into a frozen :class:`~phasegraph.model.MachineDef`
when it has no problem. A :class:`Resolver` finds the machines a graph or a machine
uses by name (reading each file once), follows nested machines, reports unknown and
recursive nesting, and lists the hooks a node must bind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from phasegraph import model
from phasegraph.errors import Problem, SourceLocation
from phasegraph.spec import _schema as schema
from phasegraph.spec._models import step_parts
from phasegraph.spec._settings import settings_problems
from phasegraph.spec._yaml import Document, read_file

__all__ = ["MachineFile", "Resolver", "Sites", "read_machine", "unknown_machine"]

Sites = dict[str, list[tuple[str, tuple[str, ...]]]]
"""Hook -> every (state path, triggers that state accepts) carrying it."""


@dataclass(frozen=True, slots=True)
class MachineFile:
    """One machine file: its document, spec, and definition when the file is sound."""

    name: str
    doc: Document
    spec: schema.MachineSpec
    definition: model.MachineDef | None


def read_machine(path: Path) -> tuple[MachineFile | None, list[Problem]]:
    """Read, check and (when sound) convert the machine file at ``path``.

    Returns:
        The machine (None when not even its shape could be checked) and its problems.
    """
    doc, problems = read_file(path, "machine")
    if doc is None:
        return None, problems
    checked = schema.check_machine(doc.data)
    problems += [Problem(i.message, doc.place(i.loc)) for i in checked.issues]
    if checked.spec is None:
        return None, problems
    doc = replace(doc, locate=checked.locate)
    name = checked.spec.machine or path.stem
    definition = None if problems else _machine_def(name, checked.spec, doc)
    return MachineFile(name, doc, checked.spec, definition), problems


def _state_def(name: str, spec: schema.MachineSpec, doc: Document) -> model.StateDef:
    declared = spec.states[name]
    return model.StateDef(
        name=name,
        final=model.NodeOutcome(declared.final) if declared.final else None,
        # A non-final state that nests nothing runs the action bound to its own name.
        hook=declared.hook or (None if declared.final or declared.machine else name),
        machine=declared.machine,
        retries=declared.retries,
        description=declared.description,
        location=doc.at(("states", name)),
    )


def _machine_def(name: str, spec: schema.MachineSpec, doc: Document) -> model.MachineDef:
    live = tuple(state for state, declared in spec.states.items() if declared.final is None)
    budgets = {
        b: model.BudgetDef(name=b, limit=d.limit, spend_on=tuple(d.spend_on))
        for b, d in spec.budgets.items()
    }
    transitions = tuple(
        model.TransitionDef(
            trigger=transition.trigger,
            source=tuple(
                dict.fromkeys(s for x in transition.sources() for s in (live if x == "*" else (x,)))
            ),
            dest=transition.dest,
            conditions=tuple(transition.conditions),
            unless=tuple(transition.unless),
            location=doc.at(("transitions", index)),
        )
        for index, transition in enumerate(spec.transitions)
    )
    return model.MachineDef(
        name=name,
        initial=spec.initial,
        states=MappingProxyType({state: _state_def(state, spec, doc) for state in spec.states}),
        transitions=transitions,
        budgets=MappingProxyType(budgets),
        description=spec.description,
        location=SourceLocation(doc.path),
    )


def _nested_step_problem(
    root: str, family: Mapping[str, model.MachineDef], trigger: str, to: str
) -> str | None:
    """What is wrong with a step of an example of a machine nesting others, if anything.

    The schema checks the steps of a flat machine; here the nested machines are known.
    """
    triggers = {t.trigger for machine in family.values() for t in machine.transitions}
    if trigger not in triggers:
        listed = ", ".join(sorted(triggers))
        return (
            f"fires unknown trigger {trigger!r} (triggers of its machines: {listed})"
            + schema.did_you_mean(trigger, triggers)
        )
    machine = family[root]
    parts = to.split(model.PATH_SEPARATOR)
    for depth, part in enumerate(parts):
        if part not in machine.states:
            listed = ", ".join(machine.states)
            return (
                f"enters unknown state {to!r}: machine {machine.name!r} has no state {part!r} "
                f"(states: {listed})" + schema.did_you_mean(part, machine.states)
            )
        nested = machine.states[part].machine
        if nested is None and depth < len(parts) - 1:
            return f"enters {to!r}, but {part!r} nests no machine"
        if nested is not None and depth == len(parts) - 1:
            inner = family[nested].initial
            return (
                f"enters {to!r}, which nests machine {nested!r}: a node stands in a state "
                f"of it, e.g. {to}{model.PATH_SEPARATOR}{inner}"
            )
        if nested is not None:
            machine = family[nested]
    return None


def unknown_machine(what: str, name: str, known: Mapping[str, Path]) -> str:
    """The message for ``what`` (e.g. "node 'x' uses") naming an unknown machine."""
    return (
        f"{what} unknown machine {name!r}: use a built-in machine (states/) or list its file "
        f"under the graph's `machines:` (machines: {', '.join(sorted(known)) or 'none'})"
        + schema.did_you_mean(name, known)
    )


@dataclass
class Resolver:
    """Finds machines by name during one load: the graph's own files, then built-ins."""

    files: dict[str, Path]
    machines: dict[str, MachineFile | None] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    walked: set[str] = field(default_factory=set)

    def get(self, name: str) -> MachineFile | None:
        """The machine called ``name``, read on first use; None if unknown or unsound."""
        if name not in self.machines and name in self.files:
            machine, problems = read_machine(self.files[name])
            self.problems += problems
            if machine is not None and machine.name != name:
                text = f"this file is found as machine {name!r} but says `machine: {machine.name}`"
                self.problems.append(machine.doc.problem(("machine",), text + ": make them match"))
            self.machines[name] = machine
        return self.machines.get(name)

    def walk(self, name: str, stack: tuple[str, ...] = ()) -> None:
        """Read ``name`` and every machine nested in it; report unknown and recursive nesting."""
        machine = self.get(name)
        if machine is None or name in self.walked:
            return
        self.walked.add(name)
        stack = (*stack, name)
        for state, declared in machine.spec.states.items():
            child, loc = declared.machine, ("states", state, "machine")
            if child in stack:
                chain = " -> ".join((*stack[stack.index(child) :], child))
                text = f"nested machines recurse: {chain}; a machine may not contain itself"
                self.problems.append(machine.doc.problem(loc, text))
            elif child is not None and child not in self.files:
                text = unknown_machine(f"state {state!r} nests", child, self.files)
                self.problems.append(machine.doc.problem(loc, text))
            elif child is not None:
                self.walk(child, stack)
        self.problems += self._example_settings(name, machine)

    def _example_settings(self, name: str, machine: MachineFile) -> list[Problem]:
        """Keys of an example's ``with:`` nothing reads, judged as a node's would be."""
        family: dict[str, model.MachineDef] = {}
        if not machine.spec.examples or not self.closure(name, family):
            return []  # no examples, or the machines' own problems are reported
        found = []
        nests = any(state.machine for state in family[name].states.values())
        for index, example in enumerate(machine.spec.examples):
            node = model.NodeDef(id=name, machine=name, settings=example.settings)
            label = f"example {example.name!r}"
            for path, text in settings_problems(node, list(family.values()), label=label):
                found.append(machine.doc.problem(("examples", index, "with", *path), text))
            for position, step in enumerate(example.steps if nests else ()):
                trigger, _, to = step_parts(step)
                wrong = _nested_step_problem(name, family, trigger, to)
                if wrong is not None:
                    loc = ("examples", index, "steps", position)
                    found.append(machine.doc.problem(loc, f"{label} {wrong}"))
        return found

    def closure(
        self, name: str, found: dict[str, model.MachineDef], seen: frozenset[str] = frozenset()
    ) -> bool:
        """Add ``name`` and its nested machines to ``found``; False if any of them is unsound."""
        machine = self.get(name)
        if machine is None or machine.definition is None or name in seen:
            return False
        found[name] = machine.definition
        nested = [s.machine for s in machine.definition.states.values() if s.machine]
        return all([self.closure(child, found, seen | {name}) for child in nested])

    def hooks(self, name: str, prefix: str = "") -> Sites:
        """Every hook of a sound machine ``name``, nested machines included."""
        sites: Sites = {}
        machine = self.get(name)
        definition = machine.definition if machine else None
        if definition is None:
            return sites
        for state in definition.states.values():
            where = prefix + state.name
            if state.hook:
                accepted = {t.trigger for t in definition.transitions if state.name in t.source}
                sites.setdefault(state.hook, []).append((where, tuple(sorted(accepted))))
            if state.machine:
                for hook, nested in self.hooks(state.machine, where + "/").items():
                    sites.setdefault(hook, []).extend(nested)
        return sites
