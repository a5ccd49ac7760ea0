"""Reads of a key that a node's dependencies write only on their way to failing.

A node runs only once every node it needs (directly or not) has succeeded: a failed one
makes its dependents ``skipped``. So a key a dependency writes only in states from which
no successful final state can be reached (the fallback chain's ``emergency`` writing its
error record, then ending ``failed``) is never there when the reader runs, and the
reader's template fails (``dependency-writes-on-failure``, an error). Which hook writes
which key:

* ``shell:`` its ``capture:``, ``llm:`` its ``conversation``, ``tools:`` its key,
  ``graph:`` its ``into:``;
* a ``python:`` function declaring its keys (:func:`phasegraph.actions.writes_data`)
  those; any other function, a gate's reply or a plan may write any key the node's
  ``writes:`` lists (anything, without ``writes:``).

A writer state in a nested machine, a key the input declares, a writer that is not a
dependency of the reader (the read rules of :mod:`phasegraph.spec._reads` judge those)
are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from phasegraph.actions._base import declared_writes, declares_writes
from phasegraph.actions._python import import_bound
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.analysis._flow import Explorer
from phasegraph.core._graph import find_cycle
from phasegraph.errors import SpecError
from phasegraph.model import ActionDef, GraphDef, NodeDef, NodeOutcome
from phasegraph.spec._reads import template_reads

__all__ = ["failure_write_findings"]


def failure_write_findings(definition: GraphDef) -> list[Finding]:
    """A finding per read of a key its node's dependencies write only when failing."""
    if find_cycle(definition.nodes) is not None:
        return []  # reported as a dependency cycle
    reads = [
        (node, read)
        for node in definition.nodes
        for hook, action in node.bind.items()
        for read in dict.fromkeys(template_reads(hook, action))
    ]
    if not reads:
        return []
    schema = definition.input_schema or {}
    inputs = schema.get("properties") if isinstance(schema, Mapping) else None
    declared = set(inputs) if isinstance(inputs, Mapping) else set()
    base = Path(definition.location.path).parent if definition.location else None
    by_id = {node.id: node for node in definition.nodes}
    findings = []
    seen: set[tuple[str, str]] = set()
    for node, read in reads:
        key = read.name
        if (node.id, key) in seen or key in declared:
            continue
        seen.add((node.id, key))
        writers = [n for n in definition.nodes if n.id != node.id and _hooks(n, key, base)]
        if not writers or any(_hooks(node, key, base)):
            continue
        before = _needed(node.id, by_id)
        if any(w.id not in before for w in writers):
            continue  # a writer it does not wait for: the read rules judge that
        failing = [_failing_path(by_id[w.id], key, base, definition) for w in writers]
        if not all(failing):
            continue
        shown = "; ".join(
            f"{w.id!r} writes it only in {p}" for w, p in zip(writers, failing, strict=True)
        )
        text = (
            f"node {node.id!r} reads {{{key}}} in {read.what} (hook {read.hook!r}), but {shown}: "
            f"{node.id!r} runs only when every node it needs succeeded, so {key!r} is never "
            "there and the step fails; read it in a node that runs on the failure (or write "
            "it on the way to success)"
        )
        where = node.bind[read.hook].location or node.location
        findings.append(
            Finding(
                severity=Severity.ERROR,
                code=Code.DEPENDENCY_WRITES_ON_FAILURE,
                message=text,
                location=where,
            )
        )
    return findings


def _needed(node_id: str, nodes: Mapping[str, NodeDef]) -> set[str]:
    """Every node ``node_id`` needs, directly or not."""
    found: set[str] = set()
    queue = list(nodes[node_id].needs)
    while queue:
        other = queue.pop()
        if other not in found and other in nodes:
            found.add(other)
            queue += nodes[other].needs
    return found


def _writes(node: NodeDef, action: ActionDef, base: Path | None) -> frozenset[str] | None:
    """The keys ``action`` writes (``None``: any key)."""
    config = action.config
    if action.kind == "shell":
        return frozenset([str(config["capture"])] if config.get("capture") else [])
    if action.kind == "llm":
        return frozenset([str((config.get("llm") or {}).get("conversation", "conversation"))])
    if action.kind == "tools":
        return frozenset([str(config["tools"])])
    if action.kind == "graph":
        into = (config.get("graph") or {}).get("into")
        return frozenset([str(into)] if into else [])
    if action.kind == "http":
        return frozenset([str(config["capture"])] if config.get("capture") else [])
    if action.kind == "python":
        try:
            function = import_bound(str(config["python"]), action, base, "python target")
        except SpecError:
            return None  # reported as refused by run
        if declares_writes(function):
            return frozenset(declared_writes(function, node.settings))
    return None if node.writes is None else frozenset(node.writes)


def _hooks(node: NodeDef, key: str, base: Path | None) -> list[str]:
    """The hooks of ``node`` whose action may write ``key``."""
    return [
        hook
        for hook, action in node.bind.items()
        if (keys := _writes(node, action, base)) is None or key in keys
    ]


def _failing_path(node: NodeDef, key: str, base: Path | None, definition: GraphDef) -> str:
    """The states ``node`` writes ``key`` in, when none can still end in success ('' else)."""
    machine = definition.machines.get(node.machine)
    if machine is None:
        return ""
    hooks = set(_hooks(node, key, base))
    declared = {hook: action.triggers for hook, action in node.bind.items()}
    explored = Explorer(definition.machines, declared).explore(machine.name)
    nested = {s.machine for s in machine.states.values() if s.machine}
    for name in nested:
        child = definition.machines.get(name)
        if child is None or any(s.hook in hooks for s in child.states.values()):
            return ""  # written inside a nested machine: not judged
    writers = [
        s.name for s in machine.states.values() if s.hook in hooks and s.name in explored.reachable
    ]
    success = {s.name for s in machine.states.values() if s.final is NodeOutcome.SUCCESS}
    backwards: dict[str, set[str]] = {}
    for source, dests in explored.edges.items():
        for dest in dests:
            backwards.setdefault(dest, set()).add(source)
    winning = set(success)
    queue = list(success)
    while queue:
        for source in backwards.get(queue.pop(), ()):
            if source not in winning:
                winning.add(source)
                queue.append(source)
    if not writers or any(w in winning for w in writers):
        return ""
    return ", ".join(f"state {w!r}" for w in writers) + (
        f" of machine {machine.name!r}, from which it can only fail"
    )
