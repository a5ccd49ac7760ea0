"""Draw machines and graphs as Mermaid (renders in GitHub markdown) or Graphviz dot text.

A machine becomes a state diagram: ``[*]`` points at the initial state, final states lead
to ``[*]`` and name their outcome, a nesting state is drawn as a composite state holding
its machine, and each edge is labelled with its trigger and guards (``[reflect left]``
for ``budget:reflect``, ``[no reflect left]`` for ``unless: budget:reflect``). A graph
becomes a top-down flowchart with one box per layer of its DAG.

Findings show on the drawing: a transition exploration proves dead or shadowed is
labelled ``(dead)``/``(shadowed)`` (dashed and red in dot), a graph node lists the keys it
writes and its human gates, and a file that does not load is drawn as far as its YAML
goes, each problem shown in a note (:func:`draft_diagram`).

Mermaid's state-diagram labels may not hold ``:``, ``;``, ``#`` or ``"``; texts are
cleaned of them, and state ids that Mermaid would read as keywords are renamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph._vocabulary import DIAGRAM_FORMATS as FORMATS
from phasegraph._vocabulary import DiagramFormat as Format
from phasegraph.analysis._check import machine_family, resolve
from phasegraph.analysis._proofs import edge_marks
from phasegraph.core._graph import compile_graph
from phasegraph.errors import InputError, Problem, SpecError
from phasegraph.model import GraphDef, MachineDef, NodeDef, NodeOutcome, StateDef, TransitionDef
from phasegraph.spec import load_graph
from phasegraph.spec._loader import read_raw

__all__ = ["FORMATS", "Format", "diagram", "draft_diagram", "graph_diagram", "machine_diagram"]

Marks = Mapping[tuple[str, int], str]
"""(machine, transition index) → ``dead`` or ``shadowed``."""

_INDENT = "    "


def diagram(target: str | Path, fmt: Format = "mermaid") -> str:
    """Draw the machine or graph ``target`` (a built-in name or a path).

    Raises:
        InputError: The target cannot be read, or is neither a machine nor a graph.
        SpecError: The definition is invalid.
    """
    resolved = resolve(target)
    if resolved.kind == "machine":
        root, family = machine_family(resolved.source)
        return machine_diagram(root.name, family, fmt, marks=edge_marks(family))
    if resolved.kind == "graph":
        return graph_diagram(load_graph(resolved.source), fmt)
    raise InputError(f"{resolved.shown}: neither a machine (`states:`) nor a graph (`nodes:`)")


def machine_diagram(
    name: str,
    machines: Mapping[str, MachineDef],
    fmt: Format = "mermaid",
    *,
    marks: Marks | None = None,
    notes: tuple[str, ...] = (),
) -> str:
    """The state diagram of machine ``name`` (``machines`` holds it and those it nests).

    Args:
        name: The machine.
        machines: It and the machines it nests.
        fmt: ``mermaid`` or ``dot``.
        marks: Transitions to label dead or shadowed (see :func:`edge_marks`).
        notes: Problems to show on the drawing (a file that did not load).
    """
    marks = marks or {}
    if fmt == "dot":
        body = list(_dot_level(machines, machines[name], (), 1, marks))
        body += _dot_notes(notes)
        head = ["digraph machine {", f"{_INDENT}rankdir=LR;"]
        head.append(f'{_INDENT}node [shape=box, style=rounded, fontname="Helvetica"];')
        head.append(f'{_INDENT}edge [fontname="Helvetica", fontsize=10];')
        return "\n".join([*head, *body, "}"]) + "\n"
    lines = ["stateDiagram-v2", *_mermaid_level(machines, machines[name], (), 1, marks)]
    machine = machines[name]
    anchor = _state_id((machine.initial,)) if machine.initial in machine.states else None
    for index, note in enumerate(notes):
        if anchor is None:
            lines.append(f'{_INDENT}state "{_clean("error - " + note)}" as s__error_{index}')
        else:
            lines.append(f"{_INDENT}note left of {anchor} : {_clean('error - ' + note)}")
    return "\n".join(lines) + "\n"


def graph_diagram(definition: GraphDef, fmt: Format = "mermaid") -> str:
    """The DAG of a graph, one box per layer (nodes of a layer may run together).

    Each node shows its machine, the keys it writes (declared ``writes`` and shell
    ``capture:`` keys) and its human gates.
    """
    layers = compile_graph(definition).layers
    return _graph_text([_box(node) for node in definition.nodes], layers, fmt, ())


def _box(node: NodeDef) -> tuple[str, list[str], tuple[str, ...]]:
    """A node's id, the lines under it, and what it needs."""
    lines = [node.machine]
    writes = [*(node.writes or ()), *_captures(node)]
    if writes:
        lines.append("writes " + ", ".join(dict.fromkeys(writes)))
    gates = [
        f"{hook} ({action.config.get('human')})"
        for hook, action in node.bind.items()
        if action.kind == "human"
    ]
    if gates:
        lines.append("human gate " + ", ".join(gates))
    return node.id, lines, node.needs


def _captures(node: NodeDef) -> list[str]:
    return [
        str(action.config["capture"])
        for action in node.bind.values()
        if action.kind == "shell" and action.config.get("capture")
    ]


def _graph_text(
    boxes: list[tuple[str, list[str], tuple[str, ...]]],
    layers: Sequence[Sequence[str]] | None,
    fmt: Format,
    notes: tuple[str, ...],
) -> str:
    """Draw boxes in layers (or, with ``layers`` None, as one group) with their needs."""
    lines_of = {name: lines for name, lines, _ in boxes}
    known = set(lines_of)
    needs = [(need, name) for name, _, wants in boxes for need in wants if need in known]
    groups = layers if layers is not None else [[name for name, _, _ in boxes]]
    if fmt == "dot":
        out = ["digraph workflow {", f"{_INDENT}rankdir=TB;"]
        out.append(f'{_INDENT}node [shape=box, style=rounded, fontname="Helvetica"];')
        for index, layer in enumerate(groups):
            if layers is not None:
                out.append(f'{_INDENT}subgraph cluster_layer_{index} {{ label="layer {index}";')
            out += [
                f"{_INDENT * 2}{_quote(n)} [label={_quote(chr(10).join([n, *lines_of[n]]))}];"
                for n in layer
            ]
            if layers is not None:
                out.append(f"{_INDENT}}}")
        out += [f"{_INDENT}{_quote(a)} -> {_quote(b)};" for a, b in needs]
        out += _dot_notes(notes)
        return "\n".join([*out, "}"]) + "\n"
    ids = _flow_ids([name for name, _, _ in boxes])
    out = ["flowchart TD"]
    for index, layer in enumerate(groups):
        if layers is not None:
            out.append(f"{_INDENT}subgraph layer_{index} [layer {index}]")
        out += [
            f'{_INDENT * 2}{ids[n]}["{"<br/>".join(_flow_text(t) for t in [n, *lines_of[n]])}"]'
            for n in layer
        ]
        if layers is not None:
            out.append(f"{_INDENT}end")
    out += [f"{_INDENT}{ids[a]} --> {ids[b]}" for a, b in needs]
    for index, note in enumerate(notes):
        out.append(f'{_INDENT}error_{index}["error: {_flow_text(note)}"]')
        out.append(f"{_INDENT}style error_{index} fill:#fdd,stroke:#c00,color:#900")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- drafts


def draft_diagram(target: str | Path, fmt: Format = "mermaid") -> tuple[str, list[Problem]]:
    """Draw ``target`` even when it does not load: what its YAML holds, and the problems.

    Returns:
        The diagram, and the load problems (empty when the file loads; the diagram is
        then :func:`diagram`'s).

    Raises:
        InputError: The target cannot be read, or is neither a machine nor a graph.
    """
    try:
        return diagram(target, fmt), []
    except SpecError as exc:
        problems = list(exc.problems)
    resolved = resolve(target)
    kind = resolved.kind or "graph"
    raw, _ = read_raw(resolved.source, kind)
    notes = tuple(_note(problem) for problem in problems)
    data = raw if isinstance(raw, Mapping) else {}
    if kind == "machine":
        machine = _draft_machine(data, Path(str(resolved.source)).stem)
        if machine is not None:
            return machine_diagram(
                machine.name, {machine.name: machine}, fmt, notes=notes
            ), problems
        return _graph_text([], None, fmt, notes), problems
    return _graph_text(_draft_boxes(data), None, fmt, notes), problems


def _note(problem: Problem) -> str:
    where = problem.location
    line = f"line {where.line}: " if where is not None and where.line else ""
    return line + problem.message


def _draft_machine(data: Mapping[str, Any], default: str) -> MachineDef | None:
    raw_states = data.get("states")
    if not isinstance(raw_states, Mapping) or not raw_states:
        return None
    states: dict[str, StateDef] = {}
    for name, spec in raw_states.items():
        spec = spec if isinstance(spec, Mapping) else {}
        final = spec.get("final")
        nested = spec.get("machine")
        states[str(name)] = StateDef(
            name=str(name),
            final=NodeOutcome(final) if final in set(NodeOutcome) else None,
            hook=str(spec["hook"]) if isinstance(spec.get("hook"), str) else None,
            description=f"runs {nested}" if isinstance(nested, str) else "",
        )
    live = [name for name, state in states.items() if state.final is None]
    transitions = []
    for item in data.get("transitions") or []:
        if not isinstance(item, Mapping):
            continue
        trigger, dest, source = item.get("trigger"), item.get("dest"), item.get("source")
        given = source if isinstance(source, list) else [source]
        sources = [str(x) for s in given for x in (live if s == "*" else [s]) if x in states]
        if isinstance(trigger, str) and dest in states and sources:
            transitions.append(
                TransitionDef(
                    trigger=trigger,
                    source=tuple(sources),
                    dest=str(dest),
                    conditions=_strings(item.get("conditions")),
                    unless=_strings(item.get("unless")),
                )
            )
    initial = data.get("initial")
    name = data.get("machine") if isinstance(data.get("machine"), str) else default
    return MachineDef(
        name=str(name),
        initial=str(initial) if initial in states else next(iter(states)),
        states=MappingProxyType(states),
        transitions=tuple(transitions),
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _draft_boxes(data: Mapping[str, Any]) -> list[tuple[str, list[str], tuple[str, ...]]]:
    boxes = []
    seen: set[str] = set()
    for item in data.get("nodes") or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            continue
        node_id = item["id"]
        if node_id in seen:
            continue
        seen.add(node_id)
        wanted = item.get("needs")
        needs: list[Any] = wanted if isinstance(wanted, list) else []
        machine = item.get("machine")
        lines = [str(machine)] if isinstance(machine, str) else []
        boxes.append((node_id, lines, tuple(str(n) for n in needs)))
    return boxes


# --------------------------------------------------------------------------- labels


def _guard(predicate: str, negated: bool) -> str:
    kind, _, name = predicate.partition(":")
    if kind == "budget":
        return f"no {name} left" if negated else f"{name} left"
    text = f"{kind}.{name}"
    return f"not {text}" if negated else text


def _edges(machine: MachineDef, marks: Marks) -> list[tuple[str, str, str, str | None]]:
    """``(source, dest, label, mark)`` for every edge, in declaration order.

    An unguarded edge after guarded ones of the same trigger and source is taken only
    when they are refused, so it is labelled ``[else]``; ``mark`` is ``dead`` or
    ``shadowed`` when exploration proved the transition never fires.
    """
    edges, guarded = [], set()
    for index, transition in enumerate(machine.transitions):
        mark = marks.get((machine.name, index))
        guards = [_guard(p, False) for p in transition.conditions]
        guards += [_guard(p, True) for p in transition.unless]
        for source in transition.source:
            key = (source, transition.trigger)
            shown = guards or (["else"] if key in guarded else [])
            label = transition.trigger + (f" [{', '.join(shown)}]" if shown else "")
            label += f" ({mark})" if mark else ""
            edges.append((source, transition.dest, label, mark))
            if guards:
                guarded.add(key)
    return edges


def _notes(machine: MachineDef, state: StateDef) -> str:
    notes = []
    if state.final is not None:
        notes.append(f"{state.final} (final)")
    if state.hook and state.hook != state.name:
        notes.append(f"hook {state.hook}")
    if state.machine:
        notes.append(f"runs {state.machine}")
    spends = [b.name for b in machine.budgets.values() if state.name in b.spend_on]
    if spends:
        notes.append(f"spends {', '.join(spends)}")
    if state.description:
        short = " ".join(state.description.split())
        notes.append(short if len(short) <= 60 else short[:57] + "...")
    return _clean(", ".join(notes))


def _clean(text: str) -> str:
    # Characters that end or break a Mermaid state-diagram label, and a phrase it would
    # take for a `direction` statement anywhere on a line.
    text = text.replace(":", " -").replace(";", ",").replace("%%", "%")
    text = " ".join(re.sub(r'[#"]', " ", text).split())
    return re.sub(r"(?i)(direction)\s+(TB|BT|RL|LR)", r"\1-\2", text)


# --------------------------------------------------------------------------- mermaid


def _state_id(path: tuple[str, ...]) -> str:
    # Prefixed so no name reads as a Mermaid keyword (state, note, default..., click, end);
    # Mermaid names a composite's own start and end points `<id>_start` and `<id>_end`.
    state_id = "s_" + "__".join(path)
    return state_id + "_" if state_id.endswith(("_start", "_end")) else state_id


def _mermaid_level(
    machines: Mapping[str, MachineDef],
    machine: MachineDef,
    parents: tuple[str, ...],
    depth: int,
    marks: Marks,
) -> Iterator[str]:
    pad = _INDENT * depth
    yield f"{pad}[*] --> {_state_id((*parents, machine.initial))}"
    for state in machine.states.values():
        path = (*parents, state.name)
        state_id = _state_id(path)
        notes = _notes(machine, state)
        if state.machine is not None and state.machine in machines:
            # A composite state takes no description lines: its notes go in its label.
            yield f'{pad}state "{", ".join((state.name, notes))}" as {state_id} {{'
            yield from _mermaid_level(machines, machines[state.machine], path, depth + 1, marks)
            yield f"{pad}}}"
            continue
        yield f'{pad}state "{state.name}" as {state_id}'
        if notes:
            yield f"{pad}{state_id} : {notes}"
    for source, dest, label, _ in _edges(machine, marks):
        tail, head = _state_id((*parents, source)), _state_id((*parents, dest))
        yield f"{pad}{tail} --> {head} : {_clean(label)}"
    for state in machine.states.values():
        if state.final is not None:
            yield f"{pad}{_state_id((*parents, state.name))} --> [*]"


def _flow_ids(names: list[str]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for name in names:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
        candidate, suffix = base, 2
        while candidate in ids.values():
            candidate, suffix = f"{base}_{suffix}", suffix + 1
        ids[name] = candidate
    return ids


def _flow_text(text: str) -> str:
    return text.replace('"', "#quot;")


# --------------------------------------------------------------------------- dot


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_level(
    machines: Mapping[str, MachineDef],
    machine: MachineDef,
    parents: tuple[str, ...],
    depth: int,
    marks: Marks,
) -> Iterator[str]:
    pad = _INDENT * depth
    start = "/".join((*parents, "[*]"))
    yield f'{pad}{_quote(start)} [shape=point, width=0.15, label=""];'
    yield f"{pad}{_quote(start)} -> {_quote('/'.join((*parents, machine.initial)))};"
    for state in machine.states.values():
        node = "/".join((*parents, state.name))
        notes = _notes(machine, state)
        label = state.name + (f"\n{notes}" if notes else "")
        if state.machine is not None and state.machine in machines:
            yield f"{pad}subgraph {_quote('cluster_' + node)} {{"
            yield f"{pad}{_INDENT}label={_quote(label)};"
            yield f'{pad}{_INDENT}{_quote(node)} [shape=circle, width=0.2, label=""];'
            yield f"{pad}{_INDENT}{_quote(node)} -> {_quote(node + '/[*]')} [style=dashed];"
            yield from _dot_level(
                machines, machines[state.machine], (*parents, state.name), depth + 1, marks
            )
            yield f"{pad}}}"
            continue
        extra = ", peripheries=2" if state.final is not None else ""
        yield f"{pad}{_quote(node)} [label={_quote(label)}{extra}];"
    for source, dest, label, mark in _edges(machine, marks):
        tail, head = _quote("/".join((*parents, source))), _quote("/".join((*parents, dest)))
        style = ", style=dashed, color=red, fontcolor=red" if mark else ""
        yield f"{pad}{tail} -> {head} [label={_quote(label)}{style}];"


def _dot_notes(notes: tuple[str, ...]) -> list[str]:
    return [
        f"{_INDENT}{_quote(f'error {index}')} [shape=note, color=red, fontcolor=red, "
        f"label={_quote('error: ' + note)}];"
        for index, note in enumerate(notes)
    ]
