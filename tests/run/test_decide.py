"""One decision for the interpreter and replay: what replay needs is recorded, not guessed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from builders import CountingIds, graph, prepared, returning, review_machine
from phasegraph import Engine, EventBus
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import ActionDef, NodeDef, NodeStatus, RunStatus
from phasegraph.run import RunOptions
from phasegraph.store.memory import MemoryStore


class SteppedClock:
    """A clock that moves only when told to (plus a microsecond per reading, for order)."""

    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        self.at += timedelta(microseconds=1)
        return self.at


def _gate_and_slow_worker(clock: SteppedClock, bus: EventBus):
    """A review gate (deadline 5 s) beside a worker whose action takes 60 s of clock time.

    The worker's action finishes only after the gate has opened, so the gate's deadline
    passes while the worker's action runs: the interpreter had decided to wait for that
    action before the deadline, and fires the timeout only in the step after.
    """
    opened = asyncio.Event()
    bus.subscribe(lambda e: opened.set() if e.kind == "spec_review_request" else None)

    async def slow(ctx: ActionContext) -> ActionResult:
        await opened.wait()
        clock.at += timedelta(seconds=60)
        return ActionResult(trigger="ok", data={"worked": True})

    gate = ActionDef(
        kind="human",
        config={"human": "spec_review", "timeout": 5},
        triggers=("confirm", "reject", "timeout"),
    )
    parked = ActionDef(kind="human", config={"human": "spec_review", "park": True})
    feature = NodeDef(
        id="feature",
        machine="review",
        bind=MappingProxyType({"review": gate, "parked": parked}),
    )
    definition = graph(
        [feature, NodeDef(id="worker", machine="task")],
        machines=[review_machine()],
        concurrency=2,
    )
    actions = {
        ("feature", "plan"): returning("ok", {"spec": "v1"}),
        ("worker", "run"): slow,
    }
    return prepared(definition, actions)


async def test_a_deadline_passing_during_another_action_replays_identically():
    clock, bus = SteppedClock(), EventBus()
    plan = _gate_and_slow_worker(clock, bus)
    async with MemoryStore() as store:
        eng = Engine(store, options=RunOptions(), clock=clock, ids=CountingIds(), bus=bus)
        state = await eng.run(plan)
        history = await eng.history(state.run_id)
        report = await eng.replay(state.run_id, graph=plan)
    kinds = [(r.kind, r.node) for r in history]
    # The worker's outcome is committed after the deadline, and the timeout only after it.
    worked = kinds.index(("transition", "worker"))
    assert kinds[worked + 1] == ("reply", "feature")
    gate = next(r for r in history if r.kind == "wait").interrupts or {}
    deadline = gate[f"{state.run_id}:feature:review"].deadline
    assert deadline is not None
    assert history[worked].time > deadline
    assert state.status is RunStatus.PARKED
    assert state.nodes["worker"].status is NodeStatus.COMPLETED
    assert report.identical, report.divergence


async def test_a_reduced_key_records_the_raw_update_and_replays_without_guessing():
    appended = [["a"], "b", ["c", "d"]]  # a list item and a scalar: append takes both

    def appender():
        calls = iter(appended)

        async def act(ctx: ActionContext) -> ActionResult:
            item = next(calls)
            trigger = "again" if ctx.steps < len(appended) - 1 else "stop"
            return ActionResult(trigger=trigger, data={"log": item, "last": str(item)})

        return act

    definition = graph([NodeDef(id="n", machine="loop")], reducers={"log": "append"})
    plan = prepared(definition, {("n", "work"): appender()})
    async with MemoryStore() as store:
        eng = Engine(store, clock=SteppedClock(), ids=CountingIds())
        state = await eng.run(plan)
        history = await eng.history(state.run_id)
        report = await eng.replay(state.run_id, graph=plan)
    assert state.data["log"] == ["a", "b", "c", "d"]
    fed = [r for r in history if r.node == "n" and r.kind == "transition"]
    assert [r.result["data"] for r in fed] == [{"log": item} for item in appended]
    assert all("last" not in r.result["data"] for r in fed)  # unreduced keys are not doubled
    assert report.identical, report.divergence


async def test_a_gate_and_its_record_share_one_reading_and_a_step_is_timed_after_its_action():
    """A gate's wait record and its interrupt carry one reading of the clock; an action's
    step reads it after the action: the record's time is when its outcome was known."""
    clock = SteppedClock()

    async def slow(ctx: ActionContext) -> ActionResult:
        clock.at += timedelta(seconds=60)
        return ActionResult(trigger="ok")

    gate = ActionDef(kind="human", config={"human": "spec_review", "timeout": 5})
    feature = NodeDef(id="feature", machine="review", bind=MappingProxyType({"review": gate}))
    definition = graph([feature, NodeDef(id="worker", machine="task")], machines=[review_machine()])
    plan = prepared(definition, {("feature", "plan"): returning("ok"), ("worker", "run"): slow})
    async with MemoryStore() as store:
        eng = Engine(store, clock=clock, ids=CountingIds())
        state = await eng.run(plan)
        history = await eng.history(state.run_id)
    wait = next(r for r in history if r.kind == "wait")
    interrupt = (wait.interrupts or {})[f"{state.run_id}:feature:review"]
    assert interrupt.created_at == wait.time
    assert interrupt.deadline == wait.time + timedelta(seconds=5)
    started = next(r for r in history if r.kind == "start" and r.node == "worker")
    worked = next(r for r in history if r.kind == "transition" and r.node == "worker")
    assert worked.time - started.time >= timedelta(seconds=60)


async def test_a_run_reads_the_clock_once_per_step():
    """Deciding that an action is due reads no time: its step reads it once, at the end."""
    readings: list[datetime] = []
    clock = SteppedClock()

    class CountedClock:
        def now(self) -> datetime:
            readings.append(clock.now())
            return readings[-1]

    async def loop(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="again" if ctx.steps < 20 else "stop")

    plan = prepared(graph([NodeDef(id="n", machine="loop")]), {("n", "work"): loop})
    async with MemoryStore() as store:
        eng = Engine(store, clock=CountedClock(), ids=CountingIds())
        state = await eng.run(plan)
        history = await eng.history(state.run_id)
    assert state.status is RunStatus.COMPLETED
    assert [r.time for r in history] == sorted(set(readings))
    assert len(readings) == len(history)
