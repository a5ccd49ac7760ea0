"""Load machine and graph YAML files into validated, frozen definitions.

A file is read by :mod:`phasegraph.spec._yaml` (which remembers where every node
starts), validated through :mod:`phasegraph.spec._schema`, checked against the files it refers
to (machines by name through :mod:`phasegraph.spec._machines`, nested machines, hooks
and bindings, dependency cycles) and converted into the frozen types of
:mod:`phasegraph.model`. Every problem of a file and of the machines it uses is collected
first and raised as one :class:`~phasegraph.errors.SpecError`; each problem names
``path:line:col``.

A bare name (no ``/``, no ``.yaml`` suffix) means a built-in (see
:mod:`phasegraph.spec._catalog`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph import model
from phasegraph.core._graph import compile_graph, find_cycle
from phasegraph.core._plans import node_machines, template_label, with_plan_writes
from phasegraph.core._sources import is_file
from phasegraph.core._writes import declared_conflicts, shared_keys
from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.spec import _schema as schema
from phasegraph.spec._catalog import (
    builtin,
    builtin_files,
    builtin_graphs,
    builtin_machines,
    graph_source,
    is_name,
    machine_source,
)
from phasegraph.spec._children import child_graph_problem
from phasegraph.spec._input import input_schema_problems
from phasegraph.spec._machines import MachineFile, Resolver, read_machine, unknown_machine
from phasegraph.spec._plans import plan_problems
from phasegraph.spec._reads import read_problems
from phasegraph.spec._settings import settings_problems
from phasegraph.spec._yaml import Document, YamlLimits, parse_text, read_file

__all__ = [
    "YamlLimits",
    "builtin_graphs",
    "builtin_machines",
    "graph_source",
    "load_graph",
    "load_graph_text",
    "load_machine",
    "load_machine_family",
    "machine_source",
    "read_raw",
]


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
    return _load_machine(source)[0]


def load_machine_family(source: str | Path) -> tuple[model.MachineDef, dict[str, model.MachineDef]]:
    """Load a machine and every machine nested in it, each file read once.

    Returns:
        The machine, and every machine of the family (itself included) by name.

    Raises:
        SpecError: As :func:`load_machine`.
    """
    root, resolver = _load_machine(source)
    family: dict[str, model.MachineDef] = {}
    resolver.closure(root.name, family)
    return root, family


def _load_machine(source: str | Path) -> tuple[model.MachineDef, Resolver]:
    """The sound machine, and the resolver that read it and the machines it nests."""
    path = builtin(source, "states", "machine") if is_name(source) else Path(source)
    resolver = Resolver(
        {**{p.stem: p for p in path.parent.glob("*.yaml")}, **builtin_files("states")}
    )
    machine, problems = read_machine(path)
    if machine is not None:
        resolver.files[machine.name], resolver.machines[machine.name] = path, machine
        resolver.walk(str(source) if is_name(source) else machine.name)
    problems += resolver.problems
    if problems or machine is None or machine.definition is None:
        raise SpecError(_ordered(problems))
    return machine.definition, resolver


def _node_def(node: schema.NodeSpec, index: int, doc: Document) -> model.NodeDef:
    here = ("nodes", index)
    return model.NodeDef(
        id=node.id,
        machine=node.machine,
        needs=tuple(node.needs),
        bind=_bind(node.bind, here, doc, node.id),
        settings=_frozen(node.settings),
        writes=None if node.writes is None else tuple(node.writes),
        location=doc.at(here),
    )


def _bind(
    bind: Mapping[str, Any], here: schema.Loc, doc: Document, owner: str
) -> Mapping[str, model.ActionDef]:
    """A node's bindings as definitions; a ``plan:`` binding's template becomes a node."""
    bound = {}
    for hook, action in bind.items():
        where = (*here, "bind", hook)
        config = action.model_dump(by_alias=True, exclude_none=True)
        template = None
        if isinstance(action, schema.PlanAction):
            del config["plan"]["template"]
            template = _template_def(owner, action.plan.template, (*where, "plan", "template"), doc)
        bound[hook] = model.ActionDef(
            kind=action.kind,
            config=_frozen(config),
            triggers=action.declared_triggers(),
            location=doc.at(where),
            template=template,
        )
    return MappingProxyType(bound)


def _template_def(
    owner: str, template: schema.TemplateSpec, here: schema.Loc, doc: Document
) -> model.NodeDef:
    """The node each item of ``owner``'s plan becomes, as declared (id ``OWNER.*``)."""
    label = template_label(owner)
    return model.NodeDef(
        id=label,
        machine=template.machine,
        bind=_bind(template.bind, here, doc, label),
        settings=_frozen(template.settings),
        writes=None if template.writes is None else tuple(template.writes),
        location=doc.at(here),
    )


def _templates(
    node: schema.NodeSpec | schema.TemplateSpec, label: str, here: schema.Loc
) -> list[tuple[str, schema.PlanAction, schema.Loc]]:
    """Each ``plan:`` binding of a node (nested templates' too): owner, plan, where."""
    found = []
    for hook, action in node.bind.items():
        if isinstance(action, schema.PlanAction):
            where = (*here, "bind", hook)
            found.append((label, action, where))
            inner = (*where, "plan", "template")
            found += _templates(action.plan.template, template_label(label), inner)
    return found


def _template_problems(
    spec: schema.GraphSpec,
    node: schema.NodeSpec,
    here: schema.Loc,
    doc: Document,
    resolver: Resolver,
) -> list[Problem]:
    """What is wrong with the templates of a node's plans, each checked as a node is."""
    problems: list[Problem] = []
    for owner, action, where in _templates(node, node.id, here):
        template, inner = action.plan.template, (*where, "plan", "template")
        as_node = schema.NodeSpec.model_construct(
            id=template_label(owner),
            machine=template.machine,
            needs=[],
            writes=template.writes,
            settings=template.settings,
            bind=template.bind,
        )
        problems += _node_problems(as_node, inner, doc, resolver)
        problems += _capture_problems(as_node, inner, doc)
        problems += _with_problems(
            _template_def(owner, template, inner, doc), inner, doc, resolver, with_key=("with",)
        )
        problems += [
            doc.problem((*where, *place), text)
            for place, text in plan_problems(owner, action.plan, spec.reducers)
        ]
        problems += _item_settings_problems(owner, action.plan, where, doc, resolver)
    return problems


def _child_graph_problems(
    node: schema.NodeSpec, here: schema.Loc, doc: Document, folder: Path | None
) -> list[Problem]:
    """``graph:`` bindings (the node's, its plans' templates') that cannot work as written.

    Their graph is not there, or the key they write the child run's results to is not
    among the declared ``writes`` (a plan's child may hand it to its parent as ``result``).
    """
    sites: list[tuple[schema.Loc, str, Mapping[str, Any], list[str] | None, str | None]] = [
        (here, node.id, node.bind, node.writes, None)
    ]
    for owner, action, where in _templates(node, node.id, here):
        template = action.plan.template
        label = template_label(owner)
        sites.append(
            (
                (*where, "plan", "template"),
                label,
                template.bind,
                template.writes,
                action.plan.result,
            )
        )
    problems = []
    for at, owner, bind, writes, handed in sites:
        for hook, action in bind.items():
            if not isinstance(action, schema.GraphAction):
                continue
            where = (*at, "bind", hook, "graph")
            text = child_graph_problem(action.graph.graph, folder)
            if text is not None:
                problems.append(doc.problem((*where, "graph"), f"node {owner!r}: {text}"))
            into = action.graph.into
            if writes is not None and into is not None and into not in writes and into != handed:
                text = (
                    f"node {owner!r}: the graph bound to hook {hook!r} writes its child run's "
                    f"results into {into!r}, which is not in the node's writes "
                    f"({', '.join(writes) or 'none'}): add {into!r} to `writes`"
                )
                problems.append(doc.problem((*where, "into"), text))
    return problems


def _item_settings_problems(
    owner: str, plan: schema.PlanSpec, where: schema.Loc, doc: Document, resolver: Resolver
) -> list[Problem]:
    """Item fields the plan accepts as settings that nothing in the child reads."""
    properties = (plan.settings or {}).get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return []
    template = plan.template
    family: dict[str, model.MachineDef] = {}
    if template.machine not in resolver.files or not resolver.closure(template.machine, family):
        return []
    child = model.NodeDef(
        id=template_label(owner),
        machine=template.machine,
        bind=_bind(template.bind, where, doc, template_label(owner)),
        settings=MappingProxyType({str(key): None for key in properties}),
    )
    label = f"the plan items of node {owner!r}"
    read = _item_reads(template.bind)  # a template may read any field as {item[FIELD]}
    return [
        doc.problem((*where, "plan", "settings", "properties", path[0]), text)
        for path, text in settings_problems(child, list(family.values()), label=label)
        if "" not in read and path[0] not in read
    ]


_ITEM_READ = re.compile(r"\{item(?:\[([^\]]*)\])?\}")


def _item_reads(bind: Mapping[str, Any]) -> set[str]:
    """The item fields a template's bindings read as ``{item[FIELD]}`` (``""``: all)."""
    found: set[str] = set()
    stack: list[Any] = [action.model_dump() for action in bind.values()]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found.update(match.group(1) or "" for match in _ITEM_READ.finditer(value))
        elif isinstance(value, Mapping):
            stack += list(value.values())
        elif isinstance(value, list):
            stack += value
    return found


def _graph_machines(
    spec: schema.GraphSpec, doc: Document, folder: Path | None, resolver: Resolver
) -> list[Problem]:
    """Read the graph's `machines:` files and make them known by name."""
    if folder is None:
        return []  # a graph given as text: `machines:` is refused (see _graph)
    problems: list[Problem] = []
    first: dict[str, int] = {}
    for index, relative in enumerate(spec.machines):
        path = Path(os.path.normpath(folder / relative))
        if not is_file(path):
            text = (
                f"machine file {relative!r} not found at {path} (paths are relative to this file)"
            )
            problems.append(doc.problem(("machines", index), text))
            continue
        machine, found = read_machine(path)
        name = machine.name if machine else path.stem
        if name in first:
            text = f"machine {name!r} is listed twice (entries {first[name]} and {index}): keep one"
            found.append(doc.problem(("machines", index), text))
        first.setdefault(name, index)
        resolver.files[name], resolver.machines[name] = path, machine
        problems += found
    return problems


def _capture_problems(node: schema.NodeSpec, here: schema.Loc, doc: Document) -> list[Problem]:
    """A ``capture:`` key the node's declared ``writes`` leave out (the run would refuse it)."""
    if node.writes is None:
        return []
    return [
        doc.problem(
            (*here, "bind", hook, "capture"),
            f"node {node.id!r}: the action bound to hook {hook!r} captures into {key!r}, "
            f"which is not in the node's writes ({', '.join(node.writes) or 'none'}): "
            f"add {key!r} to `writes`",
        )
        for hook, action in node.bind.items()
        if (key := getattr(action, "capture", None)) is not None and key not in node.writes
    ]


def _node_problems(
    node: schema.NodeSpec, here: schema.Loc, doc: Document, resolver: Resolver
) -> list[Problem]:
    if node.machine not in resolver.files:
        text = unknown_machine(f"node {node.id!r} uses", node.machine, resolver.files)
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
            _refused(
                doc,
                f"node {node.id!r}: the action bound to hook {hook!r}",
                loc,
                key,
                trigger,
                (state, accepted),
                action,
            )
            for key, trigger in action.trigger_sources()
            for state, accepted in sites[hook]
            if trigger not in accepted
        ]
    return problems


def _refused(
    doc: Document,
    head: str,
    loc: schema.Loc,
    key: schema.Loc,
    trigger: str,
    site: tuple[str, Sequence[str]],
    action: Any,
) -> Problem:
    """A trigger the bound action may fire that the state carrying its hook refuses."""
    state, accepted = site
    accepts = f"it accepts: {', '.join(accepted) or 'nothing'}"
    if key == ("python",):  # one of phasegraph's concern actions, whose triggers are known
        return doc.problem(
            (*loc, *key),
            f"{head} ({getattr(action, 'python', '')}) fires {trigger!r}, which state "
            f"{state!r} does not accept ({accepts}); bind an action that fits the state",
        )
    if key[: len(schema.FALLBACK)] != schema.FALLBACK:
        return doc.problem(
            (*loc, *key),
            f"{head} declares trigger {trigger!r}, which state {state!r} does not accept "
            f"({accepts}); declare only accepted triggers",
        )
    listed = getattr(action, "on_exit", {})
    example = "1 for a failed check, " if "1" not in listed else ""
    text = (
        f"{head} fires {trigger!r} for every exit status its on_exit does not list "
        f"({example}127 for a missing program, ...), but state {state!r} does not accept "
        f"{trigger!r} ({accepts}): the node would fail there; map the other statuses with "
        f"`default: TRIGGER` in on_exit"
    )
    return doc.problem((*loc, *key[len(schema.FALLBACK) :]), text)


def _with_problems(
    node: model.NodeDef,
    here: schema.Loc,
    doc: Document,
    resolver: Resolver,
    *,
    with_key: schema.Loc = ("with",),
) -> list[Problem]:
    """Keys of the node's ``with:`` nothing reads (see :mod:`phasegraph.spec._settings`)."""
    if not node.settings:
        return []  # most nodes: nothing to judge, no machines to walk
    family: dict[str, model.MachineDef] = {}
    if node.machine not in resolver.files or not resolver.closure(node.machine, family):
        return []  # the machine's own problems are reported; its settings cannot be judged
    return [
        doc.problem((*here, *with_key, *path), text)
        for path, text in settings_problems(node, list(family.values()))
    ]


def _dependency_problems(
    spec: schema.GraphSpec, nodes: list[model.NodeDef], doc: Document
) -> list[Problem]:
    """A dependency cycle, or else the DAG's races and templates reading what is not there.

    Races: nodes that may run together writing one key, or one reading a key another writes.
    """
    cycle = find_cycle(nodes)
    if cycle is not None:
        first = next(index for index, node in enumerate(nodes) if node.id == cycle[0])
        text = f"dependency cycle: {' -> '.join(cycle)}; remove one of these `needs`"
        return [doc.problem(("nodes", first), text)]
    if len({node.id for node in nodes}) != len(nodes):
        return []  # duplicate ids are reported already; the DAG would be ambiguous
    input_schema = None if spec.input is None else model.frozen_map(spec.input)
    nodes = [with_plan_writes(node) for node in nodes]  # children write while it waits
    graph = model.GraphDef(
        name=doc.path, nodes=tuple(nodes), machines=model.EMPTY, input_schema=input_schema
    )
    workflow = functools.cache(lambda: compile_graph(graph))  # compiled if a rule needs it
    index = {node.id: position for position, node in enumerate(nodes)}
    problems = [
        doc.problem(("nodes", index[node.id], "bind", read.hook, *read.where), text)
        for node, read, text in read_problems(graph, workflow)
    ]
    if not shared_keys(nodes, spec.reducers):
        return problems  # the usual graph: no key is declared twice
    return problems + [
        doc.problem(("nodes", index[conflict.second], "writes"), conflict.message())
        for conflict in declared_conflicts(nodes, spec.reducers, workflow())
    ]


def _middleware(spec: schema.GraphSpec, doc: Document) -> tuple[model.MiddlewareDef, ...]:
    entries = [(e, {}) if isinstance(e, str) else next(iter(e.items())) for e in spec.middleware]
    return tuple(
        model.MiddlewareDef(
            name=name, config=_frozen(config), location=doc.at(("middleware", index))
        )
        for index, (name, config) in enumerate(entries)
    )


def _digest(name: str, spec: schema.GraphSpec, machines: list[MachineFile]) -> str:
    """sha256 of the canonical JSON of the validated graph and every machine it uses.

    The nodes are dumped one at a time as the encoder reaches them (:func:`_node_json`),
    each dropped once written: dumping the whole graph first would build every node's
    dicts and lists at once, and a graph of 20,000 nodes would hand the garbage
    collector some 100,000 more containers to walk while it is loaded. The text is the
    same either way: JSON encodes a value inside a document as it encodes it alone.
    """
    graph = spec.model_dump(mode="json", by_alias=True, exclude={"nodes"})
    graph["nodes"] = spec.nodes
    if not graph.get("output"):
        del graph["output"]  # so the digests of graphs written before `output:` stay as they were
    if not graph.get("mcp"):
        del graph["mcp"]  # likewise for graphs without MCP servers
    if graph.get("busy") is None:
        graph.pop("busy", None)  # and for graphs whose runs take no messages
    if graph.get("budget") is None:
        graph.pop("budget", None)  # likewise for graphs without a budget
    payload = {
        "graph": {**graph, "graph": name},
        "machines": {
            # A machine's examples change what `phasegraph test` checks, never what a run
            # does: a run started before an example was added resumes as the same graph.
            m.name: _machine_json(m)
            for m in machines
        },
    }
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_node_json
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _machine_json(machine: MachineFile) -> dict[str, Any]:
    """A machine as digested: what a run does, without what only ``test`` reads.

    A state's ``retries:`` is left out when it has none, so the digests of machines
    written before it stay as they were.
    """
    dumped = machine.spec.model_dump(mode="json", by_alias=True, exclude={"examples"})
    for state in dumped["states"].values():
        if state.get("retries") is None:
            state.pop("retries", None)
    return {**dumped, "machine": machine.name}


def _node_json(value: object) -> Any:
    """A node of the graph being digested, as its JSON dump (see :func:`_digest`)."""
    if isinstance(value, schema.NodeSpec):
        dumped = value.model_dump(mode="json", by_alias=True)
        for action in (dumped.get("bind") or {}).values():
            if isinstance(action, dict) and "human" in action and action.get("busy") is None:
                action.pop("busy", None)  # the digests of gates written before `busy:` stay
        return dumped
    raise TypeError(f"{type(value).__name__} is not JSON")  # pragma: no cover - dumps are JSON


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
    path = builtin(source, "graphs", "graph") if is_name(source) else Path(source)
    return _graph(lambda: read_file(path, "graph"), path.stem, path.parent)


def load_graph_text(text: str, *, name: str, limits: YamlLimits | None = None) -> model.GraphDef:
    """Load and validate a workflow graph given as YAML text rather than as a file.

    The text has no folder, so it may use built-in machines only (a ``machines:`` list
    is a problem).

    Args:
        text: The graph's YAML.
        name: What the text is called: problems and the definition are located in it
            (``name:line:col``), and it is the graph's name unless the text has a
            ``graph:`` key (as a file's stem is for a file).
        limits: Size limits for the YAML (default :class:`YamlLimits`: nesting up to 64
            levels, up to 256 aliases); e.g. ``YamlLimits(max_aliases=0)`` refuses
            every alias.

    Returns:
        The frozen graph definition, as :func:`load_graph` gives.

    Raises:
        SpecError: Every problem of the text, located in ``name``.
    """
    return _graph(lambda: parse_text(text, name, "graph", limits), name, None)


def _graph(
    read: Callable[[], tuple[Document | None, list[Problem]]],
    default_name: str,
    folder: Path | None,
) -> model.GraphDef:
    """Check a parsed graph document against everything; convert it when it is sound.

    ``read`` parses the document here, so that nothing else holds its data: once the
    data is checked, the spec holds everything needed from it, and the parsed tree (a
    few containers a node) is dropped rather than walked by every garbage collection
    while the rest of a big graph is checked and converted.
    """
    doc, problems = read()
    if doc is None:
        raise SpecError(_ordered(problems))
    if folder is None and "machines" in doc.data:
        text = (
            "a graph given as text may use built-in machines only: remove `machines:` "
            "(machine files are found next to a graph's file, and this graph has none)"
        )
        problems.append(doc.problem(("machines",), text))
    checked = schema.check_graph(doc.data)
    problems += [Problem(issue.message, doc.place(issue.loc)) for issue in checked.issues]
    if checked.spec is None:
        raise SpecError(_ordered(problems))
    doc, spec = replace(doc, data={}, locate=checked.locate), checked.spec  # see above
    if spec.input is not None:
        problems += input_schema_problems(
            spec.input, doc.at(("input",)), lambda place: doc.at(("input", *place))
        )
    resolver = Resolver(builtin_files("states"))
    problems += _graph_machines(spec, doc, folder, resolver)
    nodes = [_node_def(node, index, doc) for index, node in enumerate(spec.nodes)]
    for index, node in enumerate(spec.nodes):
        problems += _node_problems(node, ("nodes", index), doc, resolver)
        problems += _capture_problems(node, ("nodes", index), doc)
        problems += _with_problems(nodes[index], ("nodes", index), doc, resolver)
        problems += _template_problems(spec, node, ("nodes", index), doc, resolver)
        problems += _child_graph_problems(node, ("nodes", index), doc, folder)
    problems += _dependency_problems(spec, nodes, doc) + resolver.problems
    if problems:
        raise SpecError(_ordered(problems))
    machines: dict[str, model.MachineDef] = {}
    for definition in nodes:
        for machine in node_machines(definition):
            resolver.closure(machine, machines)
    name = spec.graph or default_name
    return model.GraphDef(
        name=name,
        nodes=tuple(nodes),
        machines=MappingProxyType(dict(sorted(machines.items()))),
        concurrency=spec.concurrency,
        input_schema=None if spec.input is None else _frozen(spec.input),
        reducers=MappingProxyType(dict(spec.reducers)),
        middleware=_middleware(spec, doc),
        description=spec.description,
        output=tuple(spec.output),
        busy=_busy(spec.busy),
        mcp=MappingProxyType(
            {
                name: _frozen(server.model_dump(exclude_none=True))
                for name, server in spec.mcp.items()
            }
        ),
        location=SourceLocation(doc.path),
        digest=_digest(name, spec, [m for n in machines if (m := resolver.machines.get(n))]),
        budget=None if spec.budget is None else _spend_limit(spec.budget),
    )


def _spend_limit(spec: schema.SpendSpec) -> model.SpendLimit:
    prices = {
        name: model.Price(input=price.input, output=price.output)
        for name, price in spec.prices.items()
    }
    return model.SpendLimit(
        tokens=spec.tokens,
        money=spec.money,
        prices=MappingProxyType(prices),
        required=spec.required,
    )


def _busy(busy: schema.BusySpec | str | None) -> model.BusyDef | None:
    """A graph's ``busy:`` as a definition (a bare policy takes the default trigger)."""
    if busy is None:
        return None
    if isinstance(busy, str):
        return model.BusyDef(policy=model.BusyPolicy(busy))
    return model.BusyDef(policy=model.BusyPolicy(busy.policy), trigger=busy.trigger)


def read_raw(source: str | Path, what: str) -> tuple[Mapping[str, Any] | None, list[Problem]]:
    """The parsed YAML mapping of a machine or graph file, before any check.

    For tools that show what they can of a file that does not load (``diagram``).

    Args:
        source: A path, or a built-in name.
        what: ``machine`` or ``graph``.

    Returns:
        The mapping (None when the file is not a YAML mapping) and the parse problems.
    """
    kind = "states" if what == "machine" else "graphs"
    path = builtin(source, kind, what) if is_name(source) else Path(source)
    doc, problems = read_file(path, what)
    return (None if doc is None else doc.data), problems
