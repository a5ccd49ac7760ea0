"""Load machine and graph YAML files into validated, frozen definitions.

The only module that imports ``yaml``. A file is parsed by a SafeLoader subclass that
remembers where every node starts, validated through :mod:`phasegraph.schema`, checked
against the files it refers to (machines by name, nested machines, hooks and bindings,
dependency cycles) and converted into the frozen types of :mod:`phasegraph.model`.
Every problem of a file and of the machines it uses is collected first and raised as one
:class:`~phasegraph.errors.SpecError`; each problem names ``path:line:col``.

A bare name (no ``/``, no ``.yaml`` suffix) means a built-in: a YAML file of the
package-data packages ``phasegraph.states`` (machines) or ``phasegraph.graphs`` (graphs).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from itertools import combinations
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeGuard

import yaml

from phasegraph import model, schema
from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.graph import compile_graph, find_cycle

__all__ = [
    "builtin_graphs",
    "builtin_machines",
    "graph_source",
    "load_graph",
    "load_machine",
    "machine_source",
]

_YamlPath = tuple[Any, ...]
_Sites = dict[str, list[tuple[str, tuple[str, ...]]]]
"""Hook -> every (state path, triggers that state accepts) carrying it."""


class _MarkedLoader(yaml.SafeLoader):
    """A SafeLoader that records where every node starts and which keys repeat."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.node_marks: dict[_YamlPath, yaml.Mark] = {}
        self.key_marks: dict[_YamlPath, yaml.Mark] = {}
        self.duplicates: list[tuple[Any, yaml.Mark]] = []
        self._walked: set[int] = set()

    def load_marked(self) -> Any:
        """Parse the single document, recording marks before constructing it."""
        node = self.get_single_node()
        if node is None:
            return None
        self._record(node, ())
        return self.construct_document(node)

    def _record(self, node: yaml.Node, path: _YamlPath) -> None:
        self.node_marks[path] = node.start_mark
        if id(node) in self._walked:  # an alias: walked once, so anchors never loop or explode
            return
        self._walked.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._record(item, (*path, index))
        elif isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    self.duplicates.append((key, key_node.start_mark))
                seen.add(key)
                self.key_marks[(*path, key)] = key_node.start_mark
                self._record(value_node, (*path, key))


def _at(path: str, mark: yaml.Mark | None) -> SourceLocation:
    return SourceLocation(path, mark.line + 1, mark.column + 1) if mark else SourceLocation(path)


@dataclass(frozen=True, slots=True)
class _Document:
    """A parsed YAML mapping, where each of its nodes is, and how to place spec paths."""

    path: str
    data: dict[Any, Any]
    node_marks: Mapping[_YamlPath, yaml.Mark]
    key_marks: Mapping[_YamlPath, yaml.Mark]
    locate: Callable[[schema.Loc], schema.Loc] = tuple  # salvaged-spec paths -> document paths

    def at(self, loc: schema.Loc) -> SourceLocation:
        """The location of ``loc``, a key path into the checked (maybe salvaged) spec."""
        return self.place(self.locate(loc))

    def problem(self, loc: schema.Loc, message: str) -> Problem:
        """A problem located at ``loc`` (a key path into the checked spec)."""
        return Problem(message, self.at(loc))

    def place(self, loc: schema.Loc) -> SourceLocation:
        """The location of a document path, or of its deepest ancestor in the file."""
        path: _YamlPath = ()
        for part in loc:
            options = [part, int(part)] if isinstance(part, str) and part.isdigit() else [part]
            step = next((option for option in options if (*path, option) in self.node_marks), None)
            if step is None:
                break
            path = (*path, step)
        return _at(self.path, self.key_marks.get(path) or self.node_marks.get(path))


def _read(path: Path, what: str) -> tuple[_Document | None, list[Problem]]:
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, [
            Problem(f"cannot read {what} file: {reason}; check the path", _at(shown, None))
        ]
    loader = _MarkedLoader(text)
    try:
        data = loader.load_marked()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        detail = " ".join(
            str(x) for x in (getattr(exc, "problem", exc), getattr(exc, "context", "")) if x
        )
        text = f"YAML syntax error: {detail}; check indentation, quotes and brackets"
        return None, [Problem(text, _at(shown, mark))]
    finally:
        loader.dispose()
    twice = "duplicate key {!r}: it would silently replace the earlier one; keep one"
    problems = [Problem(twice.format(key), _at(shown, mark)) for key, mark in loader.duplicates]
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        needs = "`initial:` and `states:`" if what == "machine" else "`nodes:`"
        text = f"a {what} file is a mapping with {needs}, not {found}"
        return None, [*problems, Problem(text, _at(shown, loader.node_marks.get(())))]
    return _Document(shown, data, loader.node_marks, loader.key_marks), problems


def _ordered(problems: Sequence[Problem]) -> list[Problem]:
    """Drop repeats; order by file (first seen first), then line and column."""
    unique = list(dict.fromkeys(problems))
    files: dict[str, int] = {}
    for problem in unique:
        files.setdefault(problem.location.path if problem.location else "", len(files))

    def key(problem: Problem) -> tuple[int, int, int]:
        where = problem.location or SourceLocation("")
        return files[where.path], where.line or 0, where.column or 0

    return sorted(unique, key=key)


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # Read-only at the top like every model mapping; nested values stay plain JSON types.
    return model.frozen_map(copy.deepcopy(dict(value)))


def _builtin_dir(kind: str) -> Path:
    try:
        root = resources.files(f"phasegraph.{kind}")
    except (ModuleNotFoundError, TypeError):
        root = None
    if isinstance(root, Path) and root.is_dir():
        return root
    # Editable installs may not map the package-data packages: use the repository layout.
    return Path(__file__).resolve().parent.parent / kind


def _builtins(kind: str) -> dict[str, Path]:
    return {path.stem: path for path in sorted(_builtin_dir(kind).glob("*.yaml"))}


def builtin_machines() -> list[str]:
    """Return the names of the built-in machines (``states/*.yaml``), sorted."""
    return sorted(_builtins("states"))


def builtin_graphs() -> list[str]:
    """Return the names of the built-in graphs (``graphs/*.yaml``), sorted."""
    return sorted(_builtins("graphs"))


def _builtin(name: str, kind: str, what: str) -> Path:
    found = _builtins(kind)
    if name in found:
        return found[name]
    message = (
        f"unknown built-in {what} {name!r}; to load a file, give a path containing '/' or "
        f"ending in .yaml (built-in {what}s: {', '.join(found) or 'none'})"
    )
    raise SpecError([Problem(message + schema.did_you_mean(name, found))])


def machine_source(name: str) -> Path:
    """Return the file of the built-in machine ``name``.

    Raises:
        SpecError: No built-in machine has that name (the message lists them).
    """
    return _builtin(name, "states", "machine")


def graph_source(name: str) -> Path:
    """Return the file of the built-in graph ``name``.

    Raises:
        SpecError: No built-in graph has that name (the message lists them).
    """
    return _builtin(name, "graphs", "graph")


def _is_name(source: str | Path) -> TypeGuard[str]:
    if not isinstance(source, str):
        return False
    return "/" not in source and os.sep not in source and not source.endswith((".yaml", ".yml"))


@dataclass(frozen=True, slots=True)
class _Machine:
    """One machine file: its document, spec, and definition when the file is sound."""

    name: str
    doc: _Document
    spec: schema.MachineSpec
    definition: model.MachineDef | None


def _read_machine(path: Path) -> tuple[_Machine | None, list[Problem]]:
    doc, problems = _read(path, "machine")
    if doc is None:
        return None, problems
    checked = schema.check_machine(doc.data)
    problems += [Problem(i.message, doc.place(i.loc)) for i in checked.issues]
    if checked.spec is None:
        return None, problems
    doc = replace(doc, locate=checked.locate)
    name = checked.spec.machine or path.stem
    definition = None if problems else _machine_def(name, checked.spec, doc)
    return _Machine(name, doc, checked.spec, definition), problems


def _state_def(name: str, spec: schema.MachineSpec, doc: _Document) -> model.StateDef:
    declared = spec.states[name]
    return model.StateDef(
        name=name,
        final=model.NodeOutcome(declared.final) if declared.final else None,
        # A non-final state that nests nothing runs the action bound to its own name.
        hook=declared.hook or (None if declared.final or declared.machine else name),
        machine=declared.machine,
        description=declared.description,
        location=doc.at(("states", name)),
    )


def _machine_def(name: str, spec: schema.MachineSpec, doc: _Document) -> model.MachineDef:
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


def _unknown_machine(what: str, name: str, known: Mapping[str, Path]) -> str:
    return (
        f"{what} unknown machine {name!r}: use a built-in machine (states/) or list its file "
        f"under the graph's `machines:` (machines: {', '.join(sorted(known)) or 'none'})"
        + schema.did_you_mean(name, known)
    )


@dataclass
class _Resolver:
    """Finds machines by name during one load: the graph's own files, then built-ins."""

    files: dict[str, Path]
    machines: dict[str, _Machine | None] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    walked: set[str] = field(default_factory=set)

    def get(self, name: str) -> _Machine | None:
        """The machine called ``name``, read on first use; None if unknown or unsound."""
        if name not in self.machines and name in self.files:
            machine, problems = _read_machine(self.files[name])
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
                text = _unknown_machine(f"state {state!r} nests", child, self.files)
                self.problems.append(machine.doc.problem(loc, text))
            elif child is not None:
                self.walk(child, stack)

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

    def hooks(self, name: str, prefix: str = "") -> _Sites:
        """Every hook of a sound machine ``name``, nested machines included."""
        sites: _Sites = {}
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


def load_machine(source: str | Path) -> model.MachineDef:
    """Load and validate one machine.

    Args:
        source: A path to a machine file, or the name of a built-in machine (no ``/``, no
            ``.yaml`` suffix). Nested machines are looked up among the built-ins, then
            among the ``*.yaml`` files next to it (by file stem).

    Returns:
        The frozen machine definition (``"*"`` sources expanded to every non-final state).

    Raises:
        SpecError: Every problem of the file and of the machines nested in it.
    """
    path = _builtin(source, "states", "machine") if _is_name(source) else Path(source)
    resolver = _Resolver({**{p.stem: p for p in path.parent.glob("*.yaml")}, **_builtins("states")})
    machine, problems = _read_machine(path)
    if machine is not None:
        resolver.files[machine.name], resolver.machines[machine.name] = path, machine
        resolver.walk(str(source) if _is_name(source) else machine.name)
    problems += resolver.problems
    if problems or machine is None or machine.definition is None:
        raise SpecError(_ordered(problems))
    return machine.definition


def _node_def(node: schema.NodeSpec, index: int, doc: _Document) -> model.NodeDef:
    here = ("nodes", index)
    bind = {
        hook: model.ActionDef(
            kind=action.kind,
            config=_frozen(action.model_dump(by_alias=True, exclude_none=True)),
            triggers=action.declared_triggers(),
            location=doc.at((*here, "bind", hook)),
        )
        for hook, action in node.bind.items()
    }
    return model.NodeDef(
        id=node.id,
        machine=node.machine,
        needs=tuple(node.needs),
        bind=MappingProxyType(bind),
        settings=_frozen(node.settings),
        writes=None if node.writes is None else tuple(node.writes),
        location=doc.at(here),
    )


def _graph_machines(spec: schema.GraphSpec, doc: _Document, resolver: _Resolver) -> list[Problem]:
    """Read the graph's `machines:` files and make them known by name."""
    problems: list[Problem] = []
    first: dict[str, int] = {}
    for index, relative in enumerate(spec.machines):
        path = Path(os.path.normpath(Path(doc.path).parent / relative))
        if not path.is_file():
            text = (
                f"machine file {relative!r} not found at {path} (paths are relative to this file)"
            )
            problems.append(doc.problem(("machines", index), text))
            continue
        machine, found = _read_machine(path)
        name = machine.name if machine else path.stem
        if name in first:
            text = f"machine {name!r} is listed twice (entries {first[name]} and {index}): keep one"
            found.append(doc.problem(("machines", index), text))
        first.setdefault(name, index)
        resolver.files[name], resolver.machines[name] = path, machine
        problems += found
    return problems


def _node_problems(
    node: schema.NodeSpec, here: schema.Loc, doc: _Document, resolver: _Resolver
) -> list[Problem]:
    if node.machine not in resolver.files:
        text = _unknown_machine(f"node {node.id!r} uses", node.machine, resolver.files)
        return [doc.problem((*here, "machine"), text)]
    resolver.walk(node.machine)
    if not resolver.closure(node.machine, {}):
        return []  # the machine's own problems are reported; its bindings cannot be judged
    sites = resolver.hooks(node.machine)
    problems = [
        doc.problem(
            (*here, "bind") if node.bind else here,
            f"node {node.id!r} leaves hook {hook!r} unbound (state "
            f"{', '.join(repr(where) for where, _ in carriers)} of machine {node.machine!r} has "
            f'it): add `bind: {{{hook}: {{python: "module:function"}}}}` or a shell, http or '
            "human action",
        )
        for hook, carriers in sites.items()
        if hook not in node.bind
    ]
    for hook, action in node.bind.items():
        loc = (*here, "bind", hook)
        if hook not in sites:
            text = (
                f"node {node.id!r} binds hook {hook!r}, which machine {node.machine!r} does not "
                f"have: remove the binding or fix its name (hooks: {', '.join(sorted(sites))})"
            )
            problems.append(doc.problem(loc, text + schema.did_you_mean(hook, sites)))
            continue
        problems += [
            doc.problem(
                (*loc, *key),
                f"node {node.id!r}: the action bound to hook {hook!r} declares trigger "
                f"{trigger!r}, which state {state!r} does not accept (it accepts: "
                f"{', '.join(accepted) or 'nothing'}); declare only accepted triggers",
            )
            for key, trigger in action.trigger_sources()
            for state, accepted in sites[hook]
            if trigger not in accepted
        ]
    return problems


def _dependency_problems(
    spec: schema.GraphSpec, nodes: list[model.NodeDef], doc: _Document
) -> list[Problem]:
    """A dependency cycle, or else nodes that may run together writing the same key."""
    cycle = find_cycle(nodes)
    if cycle is not None:
        first = next(index for index, node in enumerate(nodes) if node.id == cycle[0])
        text = f"dependency cycle: {' -> '.join(cycle)}; remove one of these `needs`"
        return [doc.problem(("nodes", first), text)]
    if len({node.id for node in nodes}) != len(nodes):
        return []  # duplicate ids are reported already; the DAG would be ambiguous
    workflow = compile_graph(
        model.GraphDef(name=doc.path, nodes=tuple(nodes), machines=model.EMPTY)
    )
    problems = []
    writers = [(index, node) for index, node in enumerate(nodes) if node.writes]
    for (_, a), (index, b) in combinations(writers, 2):
        shared = sorted(set(a.writes or ()) & set(b.writes or ()) - set(spec.reducers))
        if shared and workflow.unordered(a.id, b.id):
            text = (
                f"nodes {a.id!r} and {b.id!r} may run at the same time and both write "
                f"{', '.join(map(repr, shared))}: order them with `needs` or declare a reducer "
                f"(reducers: {{{shared[0]}: append}})"
            )
            problems.append(doc.problem(("nodes", index, "writes"), text))
    return problems


def _middleware(spec: schema.GraphSpec, doc: _Document) -> tuple[model.MiddlewareDef, ...]:
    entries = [(e, {}) if isinstance(e, str) else next(iter(e.items())) for e in spec.middleware]
    return tuple(
        model.MiddlewareDef(
            name=name, config=_frozen(config), location=doc.at(("middleware", index))
        )
        for index, (name, config) in enumerate(entries)
    )


def _digest(name: str, spec: schema.GraphSpec, machines: list[_Machine]) -> str:
    """sha256 of the canonical JSON of the validated graph and every machine it uses."""
    payload = {
        "graph": {**spec.model_dump(mode="json", by_alias=True), "graph": name},
        "machines": {
            m.name: {**m.spec.model_dump(mode="json", by_alias=True), "machine": m.name}
            for m in machines
        },
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_graph(source: str | Path) -> model.GraphDef:
    """Load and validate a workflow graph and every machine it uses.

    Args:
        source: A path to a graph file, or the name of a built-in graph (no ``/``, no
            ``.yaml`` suffix).

    Returns:
        The frozen graph definition; ``machines`` holds every machine its nodes use,
        nested ones included, and ``digest`` changes with any change to any of them.

    Raises:
        SpecError: Every problem of the graph file and of the machines it uses.
    """
    path = _builtin(source, "graphs", "graph") if _is_name(source) else Path(source)
    doc, problems = _read(path, "graph")
    checked = schema.check_graph(doc.data) if doc else None
    if doc and checked:
        problems += [Problem(issue.message, doc.place(issue.loc)) for issue in checked.issues]
    if doc is None or checked is None or checked.spec is None:
        raise SpecError(_ordered(problems))
    doc, spec = replace(doc, locate=checked.locate), checked.spec
    resolver = _Resolver(_builtins("states"))
    problems += _graph_machines(spec, doc, resolver)
    nodes = [_node_def(node, index, doc) for index, node in enumerate(spec.nodes)]
    for index, node in enumerate(spec.nodes):
        problems += _node_problems(node, ("nodes", index), doc, resolver)
    problems += _dependency_problems(spec, nodes, doc) + resolver.problems
    if problems:
        raise SpecError(_ordered(problems))
    machines: dict[str, model.MachineDef] = {}
    for definition in nodes:
        resolver.closure(definition.machine, machines)
    name = spec.graph or path.stem
    return model.GraphDef(
        name=name,
        nodes=tuple(nodes),
        machines=MappingProxyType(dict(sorted(machines.items()))),
        concurrency=spec.concurrency,
        input_schema=None if spec.input is None else _frozen(spec.input),
        reducers=MappingProxyType(dict(spec.reducers)),
        middleware=_middleware(spec, doc),
        description=spec.description,
        location=SourceLocation(doc.path),
        digest=_digest(name, spec, [m for n in machines if (m := resolver.machines.get(n))]),
    )
