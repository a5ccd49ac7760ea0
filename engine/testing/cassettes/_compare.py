"""Compare the entries a test's run made with the recorded ones: changes and the first divergence.

Entries are compared node by node, in order (parallel nodes may interleave differently
from one run to the next; a node's own entries may not). A model request that differs
from the recorded one is a *change*: reported, not a failure, as long as the run goes on
as recorded. Anything else that differs is a *divergence*: another hook or turn than the
recording, another outcome (trigger, state, failure), a tool call with other arguments
or another result, or a call the cassette has no answer for. The first divergence (by
the step the test's run reached it) fails the test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from phasegraph.testing.cassettes._format import Entry

__all__ = ["CassetteReport", "Change", "Divergence", "compare"]

_SHOWN: Final = 160
"""Characters of a value shown in a report line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """A model request that differs from the recorded one, answered as recorded.

    Attributes:
        recorded: The recorded entry.
        what: What changed, one line each.
    """

    recorded: Entry
    what: tuple[str, ...]
    carried: bool = False
    """Whether it only carries changes already reported (an earlier changed message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """Where the test's run stopped doing what the recording did.

    Attributes:
        reason: Why, in one sentence.
        recorded: The recorded entry there (``None``: the recording had ended).
        played: What the test's run did there (``None``: it did nothing more).
    """

    reason: str
    recorded: Entry | None
    played: Entry | None

    @property
    def step(self) -> str:
        """``step 13 (node 'build', hook 'act', turn 2, tool call 0)``: where it is."""
        entry = self.recorded or self.played
        if entry is None:
            return "the end"
        at = f"step {self.recorded.at}" if self.recorded else "after the recording"
        return f"{at} ({entry.where()})"


@dataclass(frozen=True, slots=True, kw_only=True)
class CassetteReport:
    """The outcome of driving a graph against a cassette.

    Attributes:
        graph: The graph driven.
        cassette: The cassette (its file, or the run it was taken from).
        entries: How many recorded entries the run reproduced.
        recorded: How many entries the cassette holds.
        status: How the test's run ended.
        graph_changed: Whether the graph's definition differs from the recorded one.
        changed: Model requests that changed and were answered as recorded.
        divergence: The first divergence, or ``None``: the test passes.
    """

    graph: str
    cassette: str
    entries: int
    recorded: int
    status: str
    graph_changed: bool = False
    changed: tuple[Change, ...] = ()
    divergence: Divergence | None = None

    @property
    def passed(self) -> bool:
        """Whether the run did what the recording did (changed requests allowed)."""
        return self.divergence is None

    def text(self) -> str:
        """The report as lines for a person."""
        head = f"cassette {self.cassette} against graph {self.graph!r}"
        head += " (changed since the recording)" * self.graph_changed
        changed = f"; {len(self.changed)} request(s) changed" if self.changed else ""
        lines = []
        if self.divergence is None:
            lines.append(f"{head}: passed ({self.entries} of {self.recorded} entries{changed})")
        else:
            div = self.divergence
            lines.append(f"{head}: FAILED at {div.step}")
            lines.append(f"  {div.reason}")
            lines.append(f"  the graph did:     {_describe(div.played)}")
            lines.append(f"  the recording did: {_describe(div.recorded)}")
        for change in self.changed:
            if not change.carried:
                entry = change.recorded
                lines.append(f"  changed request at step {entry.at} ({entry.where()}):")
                lines += [f"    {what}" for what in change.what]
        carried = [str(c.recorded.at) for c in self.changed if c.carried]
        if carried:
            steps = ", ".join(carried)
            lines.append(
                f"  {len(carried)} later request(s) only carry those changes (steps {steps})"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (``--json``)."""
        div = self.divergence
        return {
            "graph": self.graph,
            "cassette": self.cassette,
            "passed": self.passed,
            "status": self.status,
            "graph_changed": self.graph_changed,
            "entries": self.entries,
            "recorded": self.recorded,
            "changed": [
                {
                    "step": c.recorded.at,
                    **_key(c.recorded),
                    "what": list(c.what),
                    "carried": c.carried,
                }
                for c in self.changed
            ],
            "divergence": None
            if div is None
            else {
                "step": div.step,
                "reason": div.reason,
                "played": None if div.played is None else div.played.to_json(),
                "recorded": None if div.recorded is None else div.recorded.to_json(),
            },
        }


def _key(entry: Entry) -> dict[str, Any]:
    return {"node": entry.node, "hook": entry.hook, "turn": entry.turn}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _difference(was: Any, now: Any) -> str:
    """Where two values differ: texts around their first difference, else both, short."""
    if not (isinstance(was, str) and isinstance(now, str)):
        return f"{_short(was)} → {_short(now)}"
    start = 0
    while start < min(len(was), len(now)) and was[start] == now[start]:
        start += 1
    end = 0
    while end < min(len(was), len(now)) - start and was[-1 - end] == now[-1 - end]:
        end += 1
    context = max(0, start - 30)
    lead = "…" if context else ""
    old = was[context : len(was) - end] or ""
    new = now[context : len(now) - end] or ""
    return f"at character {start + 1}: {lead}{_short(old)!r} → {lead}{_short(new)!r}"


def _result_changes(was: Any, now: Any) -> str:
    """What differs between two results: each changed key of a mapping, else the values."""
    if not (isinstance(was, Mapping) and isinstance(now, Mapping)):
        return _difference(was, now)
    keys = sorted({*was, *now}, key=str)
    return "; ".join(
        f"{key} {_difference(was.get(key), now.get(key))}"
        for key in keys
        if was.get(key) != now.get(key)
    )


def _describe(entry: Entry | None) -> str:
    if entry is None:
        return "nothing more"
    where = f"{entry.where()}: "
    if entry.kind == "tool":
        return (
            f"{where}tool {entry.request.get('tool')!r} "
            f"({_short(entry.request.get('arguments', {}))}) returned "
            f"{_short(entry.answer.get('result'))}"
        )
    outcome = entry.outcome
    if "failed" in outcome:
        return f"{where}{entry.kind} failed: {_short(outcome['failed'])}"
    return f"{where}{entry.kind} fired {outcome.get('trigger')!r} to {outcome.get('state')!r}"


def _request_changes(recorded: Mapping[str, Any], played: Mapping[str, Any]) -> tuple[str, ...]:
    if recorded.get("digest") == played.get("digest"):
        return ()
    what = []
    for part in ("system", "prompt"):
        was, now = recorded.get(part), played.get(part)
        if was != now and (was is not None or now is not None):
            what.append(f"the {part} changed {_difference(was, now)}")
    old, new = list(recorded.get("messages") or ()), list(played.get("messages") or ())
    if len(old) != len(new):
        what.append(f"{len(new)} messages instead of {len(old)}")
    differ = [str(i) for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
    if differ:
        what.append(f"message(s) {', '.join(differ)} differ")
    return tuple(what) or ("the request's digest differs",)


def _diverges(recorded: Entry, played: Entry) -> str | None:
    """Why ``played`` is not what ``recorded`` did, or ``None``."""
    if played.key != recorded.key:
        return "the graph ran another hook or turn here than the recording"
    if played.kind == "tool":
        if played.request != recorded.request:
            return "the tool call differs from the recorded one"
        if played.answer != recorded.answer:
            changes = _result_changes(recorded.answer.get("result"), played.answer.get("result"))
            return f"tool {played.request.get('tool')!r} now returns something else: {changes}"
    if _fate(played.outcome) != _fate(recorded.outcome):
        return "the step's outcome differs from the recorded one"
    return None


def _fate(outcome: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an outcome is compared by: its trigger and state, or that it failed.

    A failure's message is shown, not compared: it may name a temporary path or a time.
    """
    return ("failed",) if "failed" in outcome else (outcome.get("trigger"), outcome.get("state"))


def _by_node(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    nodes: dict[str, list[Entry]] = {}
    for entry in entries:
        nodes.setdefault(entry.node, []).append(entry)
    return nodes


def compare(
    recorded: Sequence[Entry], played: Sequence[Entry], missing: Sequence[str]
) -> tuple[int, tuple[Change, ...], Divergence | None]:
    """Compare a test's entries with the recorded ones.

    Args:
        recorded: The cassette's entries.
        played: The entries of the run the test drove.
        missing: The calls the cassette had no answer for, described.

    Returns:
        How many recorded entries were reproduced, the changed requests, and the first
        divergence.
    """
    theirs, ours = _by_node(recorded), _by_node(played)
    changes: list[Change] = []
    seen: set[tuple[str, str]] = set()
    found: list[tuple[int, Divergence]] = []
    same = 0
    for node in [*theirs, *(n for n in ours if n not in theirs)]:
        was, now = theirs.get(node, []), ours.get(node, [])
        for index in range(max(len(was), len(now))):
            old = was[index] if index < len(was) else None
            new = now[index] if index < len(now) else None
            reason = _pair(old, new)
            if reason is not None or old is None or new is None:
                order = new.at if new is not None else 1 << 62
                why = reason or ""
                found.append((order, Divergence(reason=why, recorded=old, played=new)))
                break
            same += 1
            if old.kind == "llm" and (what := _request_changes(old.request, new.request)):
                changes.append(_change(old, new, what, seen))
    first = min(found, key=lambda item: item[0])[1] if found else None
    if first is not None and missing:
        first = Divergence(
            reason=f"{first.reason}; the cassette has no answer for {missing[0]}",
            recorded=first.recorded,
            played=first.played,
        )
    elif missing:
        first = Divergence(
            reason=f"the cassette has no answer for {missing[0]}", recorded=None, played=None
        )
    return same, tuple(changes), first


def _change(old: Entry, new: Entry, what: tuple[str, ...], seen: set[tuple[str, str]]) -> Change:
    """A changed request; carried when its differing messages were all seen changed before."""
    was, now = list(old.request.get("messages") or ()), list(new.request.get("messages") or ())
    pairs = {(a, b) for a, b in zip(was, now, strict=False) if a != b}
    carried = len(was) == len(now) and bool(pairs) and pairs <= seen
    seen |= pairs
    return Change(recorded=old, what=what, carried=carried)


def _pair(old: Entry | None, new: Entry | None) -> str | None:
    if old is None:
        return "the graph did more than the recording"
    if new is None:
        return "the graph stopped before doing what the recording did next"
    return _diverges(old, new)
