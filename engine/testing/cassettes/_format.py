"""The cassette file: a recorded run's answers from outside, as YAML a person can read and diff.

A cassette is a mapping (documented in ``docs/guides/cassettes.md``)::

    cassette: 1              # the format version (CASSETTE_VERSION)
    graph: coding_task       # the graph's name
    source: coding_task      # where it came from: a built-in name, or a path
    graph_digest: ...        # the definition's digest then
    run: r1                  # the run it was recorded from
    status: completed        # how it stood when recorded (a run waiting at a gate: waiting)
    input: {...}             # the run's input
    entries:                 # in the order they happened
      - {at: SEQ, node: ..., hook: ..., kind: ..., turn: N, ...}

Each entry is keyed by node, hook and turn (the N-th time the node's hook ran; for a
tool call also its ``call`` index), never by its seq or its request: a graph whose
prompts or steps changed is still matched to what each of its hooks asked before. Its
``request`` (model calls: the request's digest and the prompt as sent), ``answer`` (what
the outside world answered: the model's message, a tool's result, an http or shell
action's result, a person's reply) and ``outcome`` (the trigger fired and the state
reached, or that the node failed) are what a test checks and feeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from phasegraph.errors import InputError, Problem, SourceLocation, SpecError
from phasegraph.spec._yaml import Document, YamlLimits, dump_text, parse_text

__all__ = [
    "CASSETTE_VERSION",
    "KINDS",
    "Cassette",
    "Entry",
    "read_cassette",
    "write_cassette",
]

CASSETTE_VERSION: Final = 1
"""The format version written; a reader refuses a newer one."""

KINDS: Final = ("llm", "tool", "http", "shell", "reply", "action")
"""Entry kinds: a model call, a tool call, an ``http:`` or ``shell:`` action's result, a
person's reply to a gate, and the outcome of any other action (python, tools, ...)."""

# Cassettes hold whole conversations and files: far larger than a definition.
_LIMITS: Final = YamlLimits(max_depth=200, max_aliases=0, max_nodes=10_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One thing a run asked or did, and what it got.

    Attributes:
        at: The recorded step's seq (shown in reports; never used to match).
        node: The node.
        hook: The hook that ran.
        kind: One of :data:`KINDS`.
        turn: The N-th time (from 1) the node's hook ran.
        call: A tool call's index among the calls of its turn.
        request: What was asked (a model call's digest and prompt; a tool's name and
            arguments).
        answer: What the outside world answered.
        outcome: ``trigger`` and ``state`` reached, or ``failed`` (the error).
        line: The entry's line in the file it was read from.
    """

    at: int
    node: str
    hook: str
    kind: str
    turn: int
    call: int | None = None
    request: Mapping[str, Any] = field(default_factory=dict)
    answer: Mapping[str, Any] = field(default_factory=dict)
    outcome: Mapping[str, Any] = field(default_factory=dict)
    line: int | None = None

    @property
    def key(self) -> tuple[str, str, int, int | None]:
        """What matches a played entry to a recorded one: kind, hook, turn and call."""
        return (self.kind, self.hook, self.turn, self.call)

    def where(self) -> str:
        """``node 'build', hook 'think', turn 3`` (and the call), for messages."""
        text = f"node {self.node!r}, hook {self.hook!r}, turn {self.turn}"
        return text if self.call is None else f"{text}, tool call {self.call}"

    def to_json(self) -> dict[str, Any]:
        """The entry as it is written (empty parts left out)."""
        value: dict[str, Any] = {
            "at": self.at,
            "node": self.node,
            "hook": self.hook,
            "kind": self.kind,
            "turn": self.turn,
        }
        if self.call is not None:
            value["call"] = self.call
        for name in ("request", "answer", "outcome"):
            part = getattr(self, name)
            if part:
                value[name] = dict(part)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Cassette:
    """A recorded run's entries, and what to drive again to check them.

    Attributes:
        graph: The graph's name.
        source: Where the graph came from: a built-in name or a path (relative to the
            cassette's folder when it is written there).
        graph_digest: The definition's digest when it was recorded.
        run: The run recorded.
        input: The run's input.
        entries: Every entry, in the order it happened.
        status: How the run stood when it was recorded (``completed``, ``waiting``, ...).
        path: The file it was read from.
    """

    graph: str
    source: str
    graph_digest: str
    run: str
    input: Mapping[str, Any]
    entries: tuple[Entry, ...]
    status: str = ""
    path: str | None = None

    @property
    def shown(self) -> str:
        """The cassette in messages: its file, or the run it was taken from."""
        return self.path or f"of run {self.run}"

    def to_json(self) -> dict[str, Any]:
        """The cassette as it is written."""
        return {
            "cassette": CASSETTE_VERSION,
            "graph": self.graph,
            "source": self.source,
            "graph_digest": self.graph_digest,
            "run": self.run,
            **({"status": self.status} if self.status else {}),
            "input": dict(self.input),
            "entries": [entry.to_json() for entry in self.entries],
        }


def write_cassette(cassette: Cassette, path: Path) -> None:
    """Write ``cassette`` to ``path`` as YAML.

    Raises:
        InputError: The file cannot be written.
    """
    text = (
        "# A phasegraph cassette: replay it with 'phasegraph test --cassette FILE'.\n"
        + dump_text(cassette.to_json())
    )
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"cannot write the cassette {str(path)!r}: {exc.strerror or exc}"
        ) from None


def read_cassette(path: Path) -> Cassette:
    """Read and check the cassette at ``path``.

    Raises:
        InputError: The file does not exist or cannot be read.
        SpecError: It is not a cassette: every problem, at ``file:line:column``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise InputError(f"cannot read the cassette {str(path)!r}: {why}") from None
    document, problems = parse_text(text, str(path), "cassette", _LIMITS)
    if document is None:
        raise SpecError(problems or [Problem("not a cassette", SourceLocation(str(path)))])
    cassette = _checked(document, problems)
    if problems or cassette is None:
        raise SpecError(problems)
    return cassette


def _checked(doc: Document, problems: list[Problem]) -> Cassette | None:
    data = doc.data
    version = data.get("cassette")
    if version != CASSETTE_VERSION:
        if isinstance(version, int) and version > CASSETTE_VERSION:
            why = f"cassette version {version} is newer than this phasegraph reads"
        else:
            why = f"not a phasegraph cassette (`cassette: {CASSETTE_VERSION}` is missing)"
        problems.append(doc.problem(("cassette",), f"{why}; record it again"))
        return None
    for key in ("graph", "source", "run", "graph_digest"):
        if not isinstance(data.get(key), str) or not data[key]:
            problems.append(doc.problem((key,), f"`{key}` must be a non-empty string"))
    status = data.get("status", "")
    if not isinstance(status, str):
        problems.append(doc.problem(("status",), "`status` must be a run status"))
    run_input = data.get("input") or {}
    if not isinstance(run_input, dict):
        problems.append(doc.problem(("input",), "`input` must be a mapping"))
    items = data.get("entries")
    if not isinstance(items, list):
        problems.append(doc.problem(("entries",), "`entries` must be a list of entries"))
        return None
    entries = [_entry(doc, index, item, problems) for index, item in enumerate(items)]
    if problems:
        return None
    return Cassette(
        graph=data["graph"],
        source=data["source"],
        graph_digest=data["graph_digest"],
        run=data["run"],
        input=run_input,
        entries=tuple(e for e in entries if e is not None),
        status=status,
        path=doc.path,
    )


_FIELDS: Final = {"at": int, "node": str, "hook": str, "kind": str, "turn": int}
_PARTS: Final = ("request", "answer", "outcome")


def _entry(doc: Document, index: int, item: Any, problems: list[Problem]) -> Entry | None:
    here = ("entries", index)
    if not isinstance(item, dict):
        problems.append(doc.problem(here, f"entry {index} must be a mapping"))
        return None
    bad = len(problems)
    for name, kind in _FIELDS.items():
        value = item.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            problems.append(
                doc.problem((*here, name), f"entry {index}: `{name}` must be {kind.__name__}")
            )
    if isinstance(item.get("kind"), str) and item["kind"] not in KINDS:
        problems.append(
            doc.problem((*here, "kind"), f"entry {index}: kind must be one of {', '.join(KINDS)}")
        )
    call = item.get("call")
    if call is not None and (not isinstance(call, int) or isinstance(call, bool)):
        problems.append(doc.problem((*here, "call"), f"entry {index}: `call` must be int"))
    for part in _PARTS:
        if not isinstance(item.get(part) or {}, dict):
            problems.append(
                doc.problem((*here, part), f"entry {index}: `{part}` must be a mapping")
            )
    unknown = sorted(set(item) - {*_FIELDS, "call", *_PARTS})
    if unknown:
        problems.append(doc.problem(here, f"entry {index}: unknown keys {', '.join(unknown)}"))
    if len(problems) > bad:
        return None
    return Entry(
        at=item["at"],
        node=item["node"],
        hook=item["hook"],
        kind=item["kind"],
        turn=item["turn"],
        call=call,
        request=item.get("request") or {},
        answer=item.get("answer") or {},
        outcome=item.get("outcome") or {},
        line=doc.at(here).line,
    )
