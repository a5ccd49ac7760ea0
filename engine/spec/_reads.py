"""What ``{name}`` templates read, and the rules on it: read only what is there, and in time.

An action's templates (a shell command, its ``cwd`` and ``env``; an http URL, headers
and body; a gate's payload; an llm ``system`` and ``prompt``; a tools ``cwd``; a child
run's ``input``) are filled from the run's input and data when the action runs. A name
nothing provides fails that step, and a key another node may be writing at the same
moment gives a value that depends on timing, which no resume or replay can repeat. So
when a graph loads (for ``check`` and ``run`` alike) each read is judged:

* a read of a key that a node the reader does not wait for writes, while both may run
  at the same time, is refused like two nodes writing one key;
* a read of a key nothing writes and the input does not declare is refused: the step
  would fail. This needs every writer known, so it applies in full when the graph
  declares its ``input:`` and no node may write keys it does not declare (a ``python:``
  function of the user's own, a gate reply or a node without ``writes:`` may); otherwise
  only a name that looks like a misspelling of a key that is there is refused.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from phasegraph import model
from phasegraph.core._graph import WorkflowGraph
from phasegraph.spec._settings import OWN_PYTHON

__all__ = ["Read", "read_problems", "template_reads"]

_NEAR: Final = 0.8
_PAYLOAD: Final = "payload"  # an llm template's name for the entering trigger's payload
_EXTRA_WRITES: Final = ("phasegraph.concerns.fallback:",)
"""Built-in actions that write a key beyond the node's ``writes:`` (the error record)."""


@dataclass(frozen=True, slots=True)
class Read:
    """A ``{name}`` read in a template of a bound action.

    Attributes:
        hook: The hook the action is bound to.
        where: The template's key path inside the action.
        name: The top-level key it reads.
        what: The template, as messages name it (``its shell command``).
    """

    hook: str
    where: tuple[str | int, ...]
    name: str
    what: str


def _names(value: Any, where: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every placeholder name in the strings of ``value``, with the key path of its string."""
    if isinstance(value, str):
        for _, path in model.template_parts(value):
            if path is not None:
                yield where, path[0]
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _names(item, (*where, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _names(item, (*where, index))


_TEMPLATES: Final[Mapping[str, tuple[tuple[tuple[str, ...], str], ...]]] = {
    "shell": ((("shell",), "its shell command"), (("cwd",), "its cwd"), (("env",), "its env")),
    "http": (
        (("http", "url"), "its URL"),
        (("http", "headers"), "its headers"),
        (("http", "body"), "its body"),
    ),
    "human": ((("payload",), "its gate payload"),),
    "llm": ((("llm", "system"), "its system message"), (("llm", "prompt"), "its prompt")),
    "tools": ((("cwd",), "its cwd"),),
    "graph": ((("graph", "input"), "its child run's input"),),
}
"""Action kind -> where its templates are (their values are filled from input and data)."""


def template_reads(hook: str, action: model.ActionDef) -> list[Read]:
    """The names ``action``'s templates read from the run's input and data."""
    reads = []
    for path, what in _TEMPLATES.get(action.kind, ()):
        value: Any = action.config
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        for where, name in _names(value, path):
            if not (action.kind == "llm" and name == _PAYLOAD):
                reads.append(Read(hook, where, name, what))
    return reads


def _writes(node: model.NodeDef) -> tuple[frozenset[str], bool]:
    """The keys ``node`` writes, and whether it may write others nobody can list."""
    targets = [str(a.config.get("python", "")) for a in node.bind.values() if a.kind == "python"]
    extra = any(not t.startswith(OWN_PYTHON) or t.startswith(_EXTRA_WRITES) for t in targets)
    if node.writes is not None:
        return frozenset(node.writes), extra
    keys = set()
    for action in node.bind.values():
        if action.config.get("capture"):
            keys.add(str(action.config["capture"]))
        if action.kind == "llm":
            keys.add(str(action.config["llm"].get("conversation", "conversation")))
        if action.kind == "tools":
            keys.add(str(action.config["tools"]))
        if action.kind == "graph" and action.config["graph"].get("into"):
            keys.add(str(action.config["graph"]["into"]))
    opened = any(action.kind in ("python", "human") for action in node.bind.values())
    return frozenset(keys), extra or opened


@dataclass(frozen=True, slots=True)
class _Graph:
    """What judges the reads of one graph."""

    workflow: WorkflowGraph
    writers: Mapping[str, tuple[str, ...]]  # key -> the nodes writing it, in order
    inputs: frozenset[str]
    closed: bool  # every writer is known and the input is declared

    after: dict[str, frozenset[str]] = field(default_factory=dict)  # cache of descendants

    def present(self) -> set[str]:
        return {*self.writers, *self.inputs}

    def later(self, node: str) -> frozenset[str]:
        """The nodes that (transitively) need ``node``."""
        if node not in self.after:
            self.after[node] = frozenset(self.workflow.descendants(node))
        return self.after[node]


def _judge(graph: model.GraphDef, workflow: WorkflowGraph) -> _Graph:
    writers: dict[str, list[str]] = {}
    unknown = False
    for node in graph.nodes:
        keys, extra = _writes(node)
        unknown |= extra
        for key in sorted(keys):
            writers.setdefault(key, []).append(node.id)
    schema = graph.input_schema
    properties = schema.get("properties") if schema is not None else None
    inputs = frozenset(properties) if isinstance(properties, Mapping) else frozenset()
    return _Graph(
        workflow=workflow,
        writers={key: tuple(ids) for key, ids in writers.items()},
        inputs=inputs,
        closed=not unknown and schema is not None,
    )


def read_problems(
    graph: model.GraphDef, compiled: Callable[[], WorkflowGraph]
) -> list[tuple[model.NodeDef, Read, str]]:
    """Reads that race a write, and reads of keys that are not there.

    Args:
        graph: The graph (its nodes and input schema).
        compiled: Its DAG, asked for only when some template reads a key.

    Returns:
        (reading node, the read, message) for each problem, in declaration order.
    """
    reads = [
        (node, read)
        for node in graph.nodes
        for hook, action in node.bind.items()
        for read in dict.fromkeys(template_reads(hook, action))
    ]
    if not reads:
        return []  # most graphs: no template reads a key, no DAG to compile for it
    judged = _judge(graph, compiled())
    found = []
    seen: set[tuple[str, str, str]] = set()
    for node, read in reads:
        if (node.id, read.hook, read.name) in seen:
            continue
        seen.add((node.id, read.hook, read.name))
        text = _read_problem(judged, node, read)
        if text is not None:
            found.append((node, read, text))
    return found


def _read_problem(graph: _Graph, node: model.NodeDef, read: Read) -> str | None:
    head = f"node {node.id!r} reads {{{read.name}}} in {read.what} (hook {read.hook!r})"
    writers = graph.writers.get(read.name, ())
    if node.id in writers:
        return None  # its own write: a step of this node made it
    racing = [w for w in writers if graph.workflow.unordered(node.id, w)]
    if racing:
        return (
            f"{head}, while node {racing[0]!r}, which may run at the same time, writes "
            f"{read.name!r}: the value read would depend on timing; add `needs: "
            f"[{racing[0]}]` to {node.id!r} (or read another key)"
        )
    later = graph.later(node.id) if writers else frozenset()
    if any(w not in later for w in writers) or read.name in graph.inputs:
        return None
    if writers and graph.closed:
        return (
            f"{head}, but only {', '.join(map(repr, writers))} writes {read.name!r}, and "
            f"it runs after {node.id!r} (it needs it): make the writer run first, or read "
            "another key"
        )
    near = difflib.get_close_matches(read.name, sorted(graph.present()), n=1, cutoff=_NEAR)
    if near and not writers:
        return (
            f"{head}, which nothing writes and the input does not declare; did you mean "
            f"{{{near[0]}}}?"
        )
    if graph.closed and not writers:
        listed = ", ".join(sorted(graph.present())) or "none"
        return (
            f"{head}, which no node writes and the input does not declare (keys there: "
            f"{listed}): the step would fail; write it, declare it under `input:` "
            f"`properties:`, or fix the name"
        )
    return None
