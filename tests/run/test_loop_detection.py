"""The loop_detection middleware: unit properties, and runs through the real interpreter.

Scenarios from note 003 (U1 loop detection, KTD2 warn before stopping, AE2) and note 001
(loop threshold 3 in keep-working loops).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import engine, prepared
from concern_kit import concern_graph, events_of, node, path_trail, run_graph, script
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns import fallback
from phasegraph.errors import LoopDetectedError, SpecError
from phasegraph.model import NodeOutcome, StepRecord
from phasegraph.run._middleware import MIDDLEWARE, LoopDetection, call_hash
from phasegraph.store.memory import MemoryStore
from phasegraph.testing._crash import _RUN_ID as _CRASH_RUN
from phasegraph.testing._crash import _CrashingStore, _drive

# --------------------------------------------------------------------------- unit level


class Probe:
    """Calls the middleware like the interpreter does, with a fake tool and event sink."""

    def __init__(self, middleware: LoopDetection, node_id: str = "n", run_id: str = "r") -> None:
        self.middleware = middleware
        self.node_id, self.run_id = node_id, run_id
        self.events: list[tuple[str, Mapping[str, Any]]] = []
        self.dispatched: list[tuple[str, dict[str, Any]]] = []
        self.seen: list[ActionContext] = []
        self.steps = 0  # each action call is one step of the node, as in a run

    def ctx(self, hook: str = "work", payload=None, settings=None) -> ActionContext:
        async def tool(name: str, /, **arguments: Any) -> Mapping[str, Any]:
            self.dispatched.append((name, arguments))
            return {"ok": True}

        return ActionContext(
            run_id=self.run_id,
            node_id=self.node_id,
            state=hook,
            hook=hook,
            input={},
            data={},
            payload=payload or {},
            settings=settings or {},
            steps=self.steps,
            emit=lambda kind, fields: self.events.append((kind, fields)),
            tool=tool,
        )

    async def action(self, hook="work", payload=None, settings=None) -> ActionContext:
        async def inner(ctx: ActionContext) -> ActionResult:
            self.seen.append(ctx)
            return ActionResult(trigger="ok")

        await self.middleware(self.ctx(hook, payload, settings), inner)
        self.steps += 1
        return self.seen[-1]

    async def tools(self, calls, hook="work", settings=None) -> list[Mapping[str, Any]]:
        """One action call (hook ``hook``) making the tool ``calls`` in turn."""
        results: list[Mapping[str, Any]] = []

        async def inner(ctx: ActionContext) -> ActionResult:
            for name, arguments in calls:
                results.append(await ctx.tool(name, **arguments))
            return ActionResult(trigger="ok")

        try:
            await self.middleware(self.ctx(hook, {"call": len(self.seen)}, settings), inner)
        finally:
            self.steps += 1
        self.seen.append(self.ctx(hook))
        return results


async def test_distinct_calls_are_never_flagged():
    """003 U1 happy path: five different tool calls → no corrective message, no event."""
    probe = Probe(LoopDetection())
    results = await probe.tools([("read_file", {"path": f"f{i}.py"}) for i in range(5)])
    assert all("loop_warning" not in r for r in results)
    assert probe.events == []
    assert len(probe.dispatched) == 5


async def test_third_identical_call_raises_after_one_warning():
    """003 U1 edge: three identical calls (same tool, same arguments) → the 2nd gets the
    corrective message, the 3rd raises LoopDetectedError (and is not dispatched)."""
    probe = Probe(LoopDetection())
    same = ("read_file", {"path": "app.py"})
    with pytest.raises(LoopDetectedError) as raised:
        await probe.tools([same, same, same])
    assert raised.value.node_id == "n"
    assert len(probe.dispatched) == 2
    assert [kind for kind, _ in probe.events] == ["loop_detected"]
    assert "read_file" in probe.events[0][1]["message"]


async def test_second_identical_call_carries_the_corrective_message():
    """003 KTD2: detection injects a corrective message instead of stopping at once."""
    probe = Probe(LoopDetection())
    same = ("search", {"query": "flaky test", "limit": 5})
    results = await probe.tools([same, same])
    assert "loop_warning" not in results[0]
    assert results[1]["ok"] is True
    assert "repeating search" in results[1]["loop_warning"]
    assert probe.events[0][1]["count"] == 2


async def test_same_tool_with_different_arguments_is_not_a_loop():
    """003 U1 edge: same tool, different arguments → different hashes, no detection."""
    probe = Probe(LoopDetection())
    await probe.tools([("read_file", {"path": p}) for p in ("a.py", "b.py", "c.py", "d.py")])
    assert probe.events == []


def test_argument_order_does_not_change_the_hash():
    """003 U1: the hash is over canonical JSON (sorted keys)."""
    assert call_hash("t", {"a": 1, "b": [1, {"x": 2, "y": 3}]}) == call_hash(
        "t", {"b": [1, {"y": 3, "x": 2}], "a": 1}
    )
    assert call_hash("t", {"a": 1}) != call_hash("u", {"a": 1})
    assert call_hash("t", {"a": 1}) != call_hash("t", {"a": "1"})


async def test_repeat_outside_the_window_is_forgotten():
    """003 U1 "sliding window of the last N steps": a call repeated after 5 others is new."""
    probe = Probe(LoopDetection(window=5))
    calls = [("t", {"i": 0})] + [("t", {"i": i}) for i in range(1, 6)] + [("t", {"i": 0})]
    await probe.tools(calls)
    assert probe.events == []


async def test_action_call_gets_message_in_context():
    """003 R1/KTD2: a repeated action call (same hook, same entering payload) sees the
    corrective message in ctx.messages."""
    probe = Probe(LoopDetection())
    first = await probe.action(payload={"q": 1})
    second = await probe.action(payload={"q": 1})
    assert first.messages == ()
    assert len(second.messages) == 1
    assert "repeating work" in second.messages[0]
    with pytest.raises(LoopDetectedError):
        await probe.action(payload={"q": 1})


async def test_threshold_three_for_keep_working_loops():
    """001 U4 "loop detector threshold 3 — 2 similar retries don't abort, 3 do": from the
    middleware setting and from a node's with.loop_detection.threshold."""
    for middleware, node_settings in (
        (LoopDetection(threshold=3), None),
        (LoopDetection(), {"loop_detection": {"threshold": 3}}),
    ):
        probe = Probe(middleware)
        assert (await probe.action(payload={}, settings=node_settings)).messages == ()
        assert (await probe.action(payload={}, settings=node_settings)).messages == ()
        assert len((await probe.action(payload={}, settings=node_settings)).messages) == 1
        with pytest.raises(LoopDetectedError):
            await probe.action(payload={}, settings=node_settings)


async def test_reset_hook_starts_a_new_attempt():
    """001 KTD-9: a call to a reset hook (reflect) empties the node's window."""
    probe = Probe(LoopDetection())
    same = ("read_file", {"path": "app.py"})
    await probe.tools([same])
    await probe.action(hook="reflect")
    results = await probe.tools([same])
    assert "loop_warning" not in results[0]
    assert probe.events == []


async def test_windows_are_per_node_and_per_run():
    """Two nodes (or runs) making the same call do not count against each other."""
    middleware = LoopDetection()
    same = ("read_file", {"path": "app.py"})
    for node_id, run_id in (("a", "r1"), ("b", "r1"), ("a", "r2")):
        probe = Probe(middleware, node_id=node_id, run_id=run_id)
        await probe.tools([same])
        assert probe.events == []


def test_registered_and_validated():
    """The middleware is registered as loop_detection; bad settings are definition errors."""
    assert MIDDLEWARE["loop_detection"] is LoopDetection
    with pytest.raises(SpecError, match="window >= 1"):
        LoopDetection(window=0)
    definition = concern_graph(
        [node("a", "task")], middleware=[("loop_detection", {"threshold": 1})]
    )
    with pytest.raises(SpecError, match="threshold >= 2"):
        prepared(definition, {("a", "run"): script(["ok"])})


# --------------------------------------------------------------------------- property


def _reference(hashes: list[int], window: int, threshold: int) -> list[str]:
    """What should happen to each call: ok, warn, or raise (and the window restarts).

    Action calls (hashes from 1000) and tool calls share the window, but a warning is
    escalated only by the next detection of the same kind.
    """
    seen: deque[int] = deque(maxlen=window)
    outcomes: list[str] = []
    warned = {False: False, True: False}
    for h in hashes:
        kind = h < 1000
        seen.append(h)
        if seen.count(h) < threshold:
            outcomes.append("ok")
            warned[kind] = False
        elif warned[kind]:
            outcomes.append("raise")
            seen.clear()
            warned = {False: False, True: False}
        else:
            outcomes.append("warn")
            warned[kind] = True
    return outcomes


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(st.integers(0, 3), max_size=25),
    window=st.integers(1, 6),
    threshold=st.integers(2, 4),
)
def test_detection_matches_the_sliding_window_model(calls, window, threshold):
    """Property: for any call sequence the middleware warns and raises exactly as a plain
    sliding-window model says, and a raise always follows a warning."""
    probe = Probe(LoopDetection(window=window, threshold=threshold))

    async def drive() -> list[str]:
        outcomes = []
        for value in calls:
            before = len(probe.events)
            try:
                results = await probe.tools([("tool", {"v": value})])
            except LoopDetectedError:
                outcomes.append("raise")
                continue
            warned = len(probe.events) > before
            assert warned == ("loop_warning" in results[0])
            outcomes.append("warn" if warned else "ok")
        return outcomes

    # Each probe.tools call is also an action call: keep action payloads distinct so only
    # the tool calls can repeat (the model has one call per step).
    expected = _reference(_interleave(calls), window, threshold)
    outcomes = asyncio.run(drive())
    assert outcomes == [o for o in _pick_tool_outcomes(expected)]
    for index, outcome in enumerate(outcomes):
        if outcome == "raise":
            assert outcomes[index - 1] == "warn"


def _interleave(calls: list[int]) -> list[int]:
    """The hash stream the middleware sees: a distinct action hash before each tool call."""
    stream: list[int] = []
    for index, value in enumerate(calls):
        stream += [1000 + index, value]
    return stream


def _pick_tool_outcomes(outcomes: list[str]) -> list[str]:
    """The outcomes of the tool calls (every second entry); an action never repeats."""
    return outcomes[1::2]


# --------------------------------------------------------------------------- interpreter


def loop_node_graph(config=None, **with_settings):
    return concern_graph(
        [node("agent", "loop", settings=with_settings)],
        middleware=[("loop_detection", config or {})],
    )


async def test_agent_changes_strategy_after_the_warning_and_completes():
    """003 AE2: the model calls the same thing with the same arguments again → the 2nd call
    gets the corrective message, the model changes strategy, the task completes; the
    `loop_detected` event is committed with the step and published on the event bus."""
    seen: list[ActionContext] = []

    async def agent(ctx: ActionContext) -> ActionResult:
        # A step's call is the payload it was entered with: what the previous step chose.
        seen.append(ctx)
        if ctx.payload.get("search") == "docs/":
            return ActionResult(trigger="stop", data={"answer": "found it in docs/"})
        query = "docs/" if ctx.messages else "src/"  # the warning changes the strategy
        return ActionResult(trigger="again", payload={"search": query})

    published = []
    async with MemoryStore() as store:
        eng = engine(store)
        eng.bus.subscribe(lambda event: published.append(event))
        state = await eng.run(prepared(loop_node_graph(), {("agent", "work"): agent}))
        history = await eng.history(state.run_id)
    assert [dict(ctx.payload) for ctx in seen] == [
        {},
        {"search": "src/"},
        {"search": "src/"},
        {"search": "docs/"},
    ]
    assert [len(ctx.messages) for ctx in seen] == [0, 0, 1, 0]
    assert state.nodes["agent"].outcome is NodeOutcome.SUCCESS
    assert state.data == {"answer": "found it in docs/"}
    committed = events_of(history, "loop_detected")
    assert len(committed) == 1
    assert committed[0]["message"] == seen[2].messages[0]
    bus = [e for e in published if e.kind == "loop_detected"]
    assert len(bus) == 1
    assert bus[0].node == "agent"


async def test_loop_error_is_classified_loop_detected_by_the_fallback_chain(tmp_path):
    """003 U1 error path "LoopDetectedError caught, result carries the error" and 000 U3
    "main fails (LoopDetectedError) → Emergency error_code=loop_detected": a main action
    that keeps re-reading the same file, through the real tool layer; the recovery starts a
    fresh window, the retry loops again, and the emergency says loop_detected."""
    (tmp_path / "notes.txt").write_text("same every time\n", encoding="utf-8")

    async def main(ctx: ActionContext) -> ActionResult:
        for _ in range(3):
            await ctx.tool("read_file", path="notes.txt", cwd=str(tmp_path))
        return ActionResult(trigger="ok")

    definition = concern_graph(
        [node("work", "fallback_chain")], middleware=[("loop_detection", {})]
    )
    actions = {
        ("work", "main"): main,
        ("work", "recover"): fallback.recover,
        ("work", "emergency"): fallback.emergency,
    }
    state, history = await run_graph(definition, actions)
    assert path_trail(history, "work") == ["main", "recovery", "retry", "emergency", "failed"]
    assert state.data["error"]["error_code"] == "loop_detected"
    assert state.data["error"]["retryable"] is True
    assert len(events_of(history, "loop_detected")) == 2  # one warning per attempt
    raised = [r for r in state.errors if r.details.get("error_code") == "loop_detected"]
    assert [r.state for r in raised] == ["main", "retry", "emergency"]


# --------------------------------------------------------------------------- crash, resume


def _looping_agent(script_: list[tuple[int, list[int]]], folder: Path):
    """Step i enters with payload script_[i-1][0] and reads the files script_[i][1] names."""

    async def work(ctx: ActionContext) -> ActionResult:
        if ctx.steps >= len(script_):
            return ActionResult(trigger="stop")
        value, reads = script_[ctx.steps]
        for read in reads:
            await ctx.tool("read_file", path=f"f{read}.txt", cwd=str(folder))
        return ActionResult(trigger="again", payload={"v": value})

    return work


def _detections(history: list[StepRecord]) -> list[tuple[Any, ...]]:
    """Per step of the node: what it did, what loop detection said and what it remembered."""
    return [
        (
            record.kind,
            record.trigger,
            record.dest,
            tuple(e["message"] for e in record.events if e.get("kind") == "loop_detected"),
            tuple((record.result.get("output") or {}).get("loop_calls", ())),
            tuple(e.message for e in record.errors),
        )
        for record in history
        if record.node == "agent"
    ]


async def _crashed_run(definition, work, crash_at: int | None) -> tuple[int, list[StepRecord]]:
    """A run crashed before commit ``crash_at`` and resumed by a fresh process's graph."""
    store = _CrashingStore(crash_at)
    async with store:
        # Each start or resume prepares the graph again: new middleware, no memory of its own.
        eng = await _drive(
            store, lambda: prepared(definition, {("agent", "work"): work}), {}, False
        )
        return store.commits, await eng.history(_CRASH_RUN)


@settings(max_examples=25, deadline=None)
@given(
    script_=st.lists(
        st.tuples(st.integers(0, 1), st.lists(st.integers(0, 1), max_size=3)),
        min_size=1,
        max_size=6,
    ),
    threshold=st.integers(2, 3),
)
def test_a_loop_is_detected_at_the_same_call_with_or_without_a_crash(
    tmp_path_factory, script_, threshold
):
    """Property: killed before any commit and resumed in a process that never saw the run,
    a node warns and stops at the same call, remembering the same window, as when it runs
    uninterrupted (action calls repeat through the payloads, tool calls through files)."""
    folder = tmp_path_factory.mktemp("files")
    for index in (0, 1):
        (folder / f"f{index}.txt").write_text(f"file {index}\n", encoding="utf-8")
    definition = loop_node_graph({"threshold": threshold})
    work = _looping_agent(script_, folder)
    commits, straight = asyncio.run(_crashed_run(definition, work, None))
    expected = _detections(straight)
    for crash_at in range(2, commits + 1):
        _, resumed = asyncio.run(_crashed_run(definition, work, crash_at))
        assert _detections(resumed) == expected, f"crash before commit {crash_at}"
