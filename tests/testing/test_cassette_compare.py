"""Comparing a test's entries with the recorded ones: per node, changes apart, earliest first."""

from __future__ import annotations

from typing import Any

from phasegraph.testing.cassettes import Entry
from phasegraph.testing.cassettes._compare import compare


def _step(at: int, node: str, hook: str = "run", turn: int = 1, **outcome: Any) -> Entry:
    return Entry(at=at, node=node, hook=hook, kind="action", turn=turn,
                 outcome=outcome or {"trigger": "ok", "state": "done"})  # fmt: skip


def _llm(at: int, turn: int, messages: list[str], prompt: str = "p") -> Entry:
    request = {"digest": "sha256:" + "-".join(messages), "messages": messages, "prompt": prompt}
    return Entry(at=at, node="agent", hook="think", kind="llm", turn=turn, request=request,
                 outcome={"trigger": "answer", "state": "done"})  # fmt: skip


def test_parallel_nodes_may_interleave_otherwise() -> None:
    recorded = [_step(1, "a"), _step(2, "b"), _step(3, "a", turn=2), _step(4, "b", turn=2)]
    played = [_step(1, "b"), _step(2, "b", turn=2), _step(3, "a"), _step(4, "a", turn=2)]
    assert compare(recorded, played, []) == (4, (), None)


def test_the_first_divergence_is_the_earliest_the_run_reached() -> None:
    recorded = [_step(1, "a"), _step(2, "b"), _step(3, "b", turn=2)]
    played = [
        _step(1, "b"),
        _step(2, "b", turn=2, trigger="fail", state="broken"),  # b diverges at step 2
        _step(3, "a", trigger="retry", state="again"),  # a diverges later, at step 3
    ]
    same, _, divergence = compare(recorded, played, [])
    assert divergence is not None
    assert (same, divergence.step) == (1, "step 3 (node 'b', hook 'run', turn 2)")
    assert divergence.reason == "the step's outcome differs from the recorded one"


def test_a_changed_request_is_reported_once_and_carried_after() -> None:
    recorded = [_llm(1, 1, ["s1", "u1"], "old"), _llm(2, 2, ["s1", "u1", "a1"], prompt="x")]
    played = [_llm(5, 1, ["s1", "u2"], "new"), _llm(6, 2, ["s1", "u2", "a1"], prompt="x")]
    same, changes, divergence = compare(recorded, played, [])
    assert (same, divergence) == (2, None)
    assert [(c.recorded.at, c.carried) for c in changes] == [(1, False), (2, True)]
    assert changes[0].what == (
        "the prompt changed at character 1: 'old' → 'new'",
        "message(s) 1 differ",
    )


def test_a_graph_that_stops_early_names_what_the_recording_did_next() -> None:
    recorded = [_step(1, "a"), _step(2, "a", turn=2)]
    played = [_step(1, "a")]
    _, _, divergence = compare(recorded, played, ["node 'a', hook 'run', turn 2 (a model call)"])
    assert divergence is not None
    assert divergence.recorded == recorded[1]
    assert divergence.played is None
    assert divergence.reason == (
        "the graph stopped before doing what the recording did next; the cassette has no "
        "answer for node 'a', hook 'run', turn 2 (a model call)"
    )


def test_a_failure_is_compared_by_failing_not_by_its_message() -> None:
    recorded = [_step(1, "a", failed="cannot open /tmp/one/x")]
    assert compare(recorded, [_step(7, "a", failed="cannot open /tmp/two/x")], [])[2] is None
    _, _, divergence = compare(recorded, [_step(7, "a")], [])
    assert divergence is not None
    assert divergence.reason == "the step's outcome differs from the recorded one"
