"""What ``check`` proves of the graphs a graph runs as child runs (``graph:`` bindings).

The loader already refuses a binding whose graph is not there. ``check`` goes further,
for every ``graph:`` binding (of a node, or of a plan's template, nested ones too):

* the child graph loads, and so do the graphs it runs in turn: each problem found in one
  is reported where it is, and the binding is named too (its child runs could not start);
* the binding's ``input:`` gives every key the child graph's ``input:`` schema requires,
  and no key the schema refuses (the child run could not start either);
* a binding with ``into:`` runs a graph that declares ``output:`` keys (otherwise the
  key always gets an empty mapping: a warning).

A graph that runs itself, or a graph already looked at, is not loaded twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.errors import SourceLocation, SpecError
from phasegraph.model import ActionDef, GraphDef, NodeDef
from phasegraph.spec import load_graph
from phasegraph.spec._children import child_graph_source

__all__ = ["child_graph_findings"]


def child_graph_findings(definition: GraphDef) -> list[Finding]:
    """Everything wrong with the graphs ``definition`` runs as child runs (and theirs)."""
    findings: list[Finding] = []
    seen = {_source_of(definition)}
    pending = [definition]
    while pending:
        graph = pending.pop()
        folder = Path(graph.location.path).parent if graph.location else None
        for owner, hook, action in _bindings(graph.nodes):
            config: Mapping[str, Any] = action.config["graph"]
            source = child_graph_source(str(config["graph"]), folder)
            head = f"node {owner!r}: the graph bound to hook {hook!r} ({config['graph']})"
            try:
                child = load_graph(source)
            except SpecError as exc:
                failed = _error(f"{head} does not load: its child runs cannot start")
                findings.append(_at(failed, action.location))
                if source not in seen:
                    seen.add(source)
                    findings += [
                        _at(_error(f"in child graph {config['graph']}: {p.message}"), p.location)
                        for p in exc.problems
                    ]
                continue
            findings += [_at(finding, action.location) for finding in _fit(head, config, child)]
            if source not in seen:
                seen.add(source)
                pending.append(child)
    return findings


def _bindings(nodes: tuple[NodeDef, ...] | list[NodeDef]) -> Iterator[tuple[str, str, ActionDef]]:
    """Each ``graph:`` binding of ``nodes`` and of their plans' templates: owner, hook, it."""
    for node in nodes:
        for hook, action in node.bind.items():
            if action.kind == "graph":
                yield node.id, hook, action
            elif action.template is not None:
                yield from _bindings([action.template])


def _fit(head: str, config: Mapping[str, Any], child: GraphDef) -> list[Finding]:
    """Where the binding's input and ``into`` do not fit the child graph."""
    given = set(config.get("input") or {})
    schema = child.input_schema or {}
    found = []
    required = [key for key in schema.get("required") or () if key not in given]
    if required:
        keys = ", ".join(map(repr, required))
        found.append(
            _error(
                f"{head} requires input {keys}, which its `input:` does not give: its child "
                "runs cannot start"
            )
        )
    properties = schema.get("properties")
    if schema.get("additionalProperties") is False and isinstance(properties, Mapping):
        refused = sorted(given - set(properties))
        if refused:
            found.append(
                _error(
                    f"{head} does not accept input {', '.join(map(repr, refused))} (its "
                    f"input: allows {', '.join(map(repr, properties)) or 'nothing'}): its "
                    "child runs cannot start"
                )
            )
    if config.get("into") and not child.output:
        found.append(
            Finding(
                severity=Severity.WARNING,
                code=Code.CHILD_GRAPH,
                message=f"{head} declares no `output:` keys: `into: {config['into']}` always "
                "gets an empty mapping",
            )
        )
    return found


def _error(message: str) -> Finding:
    return Finding(severity=Severity.ERROR, code=Code.CHILD_GRAPH, message=message)


def _at(finding: Finding, where: SourceLocation | None) -> Finding:
    return Finding(
        severity=finding.severity, code=finding.code, message=finding.message, location=where
    )


def _source_of(definition: GraphDef) -> str:
    where = definition.location
    return str(Path(where.path).resolve()) if where is not None else definition.name
