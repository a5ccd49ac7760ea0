"""Draw machines and graphs as Mermaid (renders in GitHub markdown) or Graphviz dot text.

A machine becomes a state diagram: ``[*]`` points at the initial state, final states lead
to ``[*]`` and name their outcome, a nesting state is drawn as a composite state holding
its machine, and each edge is labelled with its trigger and guards (``[reflect left]``
for ``budget:reflect``, ``[no reflect left]`` for ``unless: budget:reflect``). A graph
becomes a top-down flowchart with one box per layer of its DAG.

Mermaid's state-diagram labels may not hold ``:``, ``;``, ``#`` or ``"``; texts are
cleaned of them, and state ids that Mermaid would read as keywords are renamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

from phasegraph.analysis._check import machine_family, resolve
from phasegraph.core import compile_graph
from phasegraph.errors import InputError
from phasegraph.model import GraphDef, MachineDef, StateDef
from phasegraph.spec import load_graph

__all__ = ["FORMATS", "Format", "diagram", "graph_diagram", "machine_diagram"]

Format = Literal["mermaid", "dot"]
FORMATS: tuple[Format, ...] = ("mermaid", "dot")
"""The output formats, default first."""

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
        return machine_diagram(root.name, family, fmt)
    if resolved.kind == "graph":
        return graph_diagram(load_graph(resolved.source), fmt)
    raise InputError(f"{resolved.shown}: neither a machine (`states:`) nor a graph (`nodes:`)")


def machine_diagram(name: str, machines: Mapping[str, MachineDef], fmt: Format = "mermaid") -> str:
    """The state diagram of machine ``name`` (``machines`` holds it and those it nests)."""
    if fmt == "dot":
        body = list(_dot_level(machines, machines[name], (), 1))
        head = ["digraph machine {", f"{_INDENT}rankdir=LR;"]
        head.append(f'{_INDENT}node [shape=box, style=rounded, fontname="Helvetica"];')
        head.append(f'{_INDENT}edge [fontname="Helvetica", fontsize=10];')
        return "\n".join([*head, *body, "}"]) + "\n"
    lines = ["stateDiagram-v2", *_mermaid_level(machines, machines[name], (), 1)]
    return "\n".join(lines) + "\n"


def graph_diagram(definition: GraphDef, fmt: Format = "mermaid") -> str:
    """The DAG of a graph, one box per layer (nodes of a layer may run together)."""
    layers = compile_graph(definition).layers
    machines = {node.id: node.machine for node in definition.nodes}
    needs = [(need, node.id) for node in definition.nodes for need in node.needs]
    if fmt == "dot":
        lines = ["digraph workflow {", f"{_INDENT}rankdir=TB;"]
        lines.append(f'{_INDENT}node [shape=box, style=rounded, fontname="Helvetica"];')
        for index, layer in enumerate(layers):
            lines.append(f'{_INDENT}subgraph cluster_layer_{index} {{ label="layer {index}";')
            lines += [
                f"{_INDENT * 2}{_quote(n)} [label={_quote(n + chr(10) + machines[n])}];"
                for n in layer
            ]
            lines.append(f"{_INDENT}}}")
        lines += [f"{_INDENT}{_quote(a)} -> {_quote(b)};" for a, b in needs]
        return "\n".join([*lines, "}"]) + "\n"
    ids = _flow_ids([node.id for node in definition.nodes])
    lines = ["flowchart TD"]
    for index, layer in enumerate(layers):
        lines.append(f"{_INDENT}subgraph layer_{index} [layer {index}]")
        lines += [
            f'{_INDENT * 2}{ids[n]}["{_flow_text(n)}<br/>{_flow_text(machines[n])}"]' for n in layer
        ]
        lines.append(f"{_INDENT}end")
    lines += [f"{_INDENT}{ids[a]} --> {ids[b]}" for a, b in needs]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- labels


def _guard(predicate: str, negated: bool) -> str:
    kind, _, name = predicate.partition(":")
    if kind == "budget":
        return f"no {name} left" if negated else f"{name} left"
    text = f"{kind}.{name}"
    return f"not {text}" if negated else text


def _edges(machine: MachineDef) -> list[tuple[str, str, str]]:
    """``(source, dest, label)`` for every edge, in declaration order.

    An unguarded edge after guarded ones of the same trigger and source is taken only
    when they are refused, so it is labelled ``[else]``.
    """
    edges, guarded = [], set()
    for transition in machine.transitions:
        guards = [_guard(p, False) for p in transition.conditions]
        guards += [_guard(p, True) for p in transition.unless]
        for source in transition.source:
            key = (source, transition.trigger)
            shown = guards or (["else"] if key in guarded else [])
            label = transition.trigger + (f" [{', '.join(shown)}]" if shown else "")
            edges.append((source, transition.dest, label))
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
            yield from _mermaid_level(machines, machines[state.machine], path, depth + 1)
            yield f"{pad}}}"
            continue
        yield f'{pad}state "{state.name}" as {state_id}'
        if notes:
            yield f"{pad}{state_id} : {notes}"
    for source, dest, label in _edges(machine):
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
                machines, machines[state.machine], (*parents, state.name), depth + 1
            )
            yield f"{pad}}}"
            continue
        extra = ", peripheries=2" if state.final is not None else ""
        yield f"{pad}{_quote(node)} [label={_quote(label)}{extra}];"
    for source, dest, label in _edges(machine):
        tail, head = _quote("/".join((*parents, source))), _quote("/".join((*parents, dest)))
        yield f"{pad}{tail} -> {head} [label={_quote(label)}];"
