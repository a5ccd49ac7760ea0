"""Replies and cancels reach the run a worker drives, and a refused one never stops it.

In one process on a private Redis (server and cluster), with the real worker: a reply is
refused where it is given when the worker would refuse it; one refused only where it is
applied leaves the drive going; a cancel the worker's first look misses (as a store blip
or a drive between two of its tasks would make it) is acted on at the next step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from phasegraph import Engine, open_store
from phasegraph.actions import ActionResult
from phasegraph.errors import (
    DataConflictError,
    GateAnsweredError,
    RunStateError,
    StaleReplyError,
    StoreUnavailableError,
)
from phasegraph.model import Actor, NodeStatus, RunState, RunStatus, frozen_map
from phasegraph.worker import Worker, WorkerOptions, WorkQueue, work_queue_of
from phasegraph.worker._driver import RunDriver
from phasegraph.worker._mail import post_reply, reply_applied

pytestmark = pytest.mark.redis

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workers"
SIDE_GATE = FIXTURES / "side_gate.yaml"


async def _look_misses(self: RunDriver, run_id: str, drive: object) -> None:
    return None  # the request is there, but this look does not see it


@asynccontextmanager
async def _driven(store_url: str) -> AsyncIterator[tuple[Engine, WorkQueue, str]]:
    """A side-gate run a worker drives, once it has taken a few steps."""
    async with open_store(store_url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        driving = Worker(engine, queue, name="w", options=WorkerOptions(reclaim_after=5))
        stop = asyncio.Event()
        working = asyncio.create_task(driving.run(stop))
        try:
            async with engine.start(SIDE_GATE, {"n": 100000, "nap": 0.02}) as run:
                run_id = run.run_id
            await queue.enqueue(run_id)
            await _until(engine, run_id, lambda s: s.nodes["count"].steps >= 5)
            yield engine, queue, run_id
        finally:
            stop.set()
            await working
            await queue.aclose()


async def _until(engine: Engine, run_id: str, done: Callable[[RunState], bool]) -> RunState:
    deadline = time.monotonic() + 30
    while not done(state := await engine.get(run_id)):
        assert time.monotonic() < deadline, f"still {state.status} at step {state.seq}"
        await asyncio.sleep(0.05)
    return state


async def _settles(probe: Callable[[], Awaitable[object]], wanted: object) -> None:
    """Until ``probe()`` returns ``wanted``: the worker does it after the step it commits."""
    deadline = time.monotonic() + 30
    while (got := await probe()) != wanted:
        assert time.monotonic() < deadline, f"still {got!r}, not {wanted!r}"
        await asyncio.sleep(0.05)


async def _raises(call: Awaitable[object], kind: type[Exception]) -> str:
    with pytest.raises(kind) as caught:
        await call
    return str(caught.value)


async def test_a_cancel_the_first_look_missed_stops_the_run_at_its_next_step(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setattr(RunDriver, "_look_for_cancel", _look_misses)
    async with _driven(store_url) as (engine, queue, run_id):
        await queue.request_cancel(run_id, "enough")
        state = await _until(engine, run_id, lambda s: s.status is RunStatus.CANCELLED)
        await _settles(lambda: queue.cancel_requested(run_id), None)  # done with, not left
    # Cancelled where it stood, long before its loop would have spent its budget.
    assert state.nodes["count"].status is NodeStatus.CANCELLED
    assert state.nodes["count"].error == "enough"


async def test_a_reply_the_worker_would_refuse_is_refused_where_it_is_given(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with _driven(store_url) as (engine, queue, run_id):
        (gate,) = (await engine.get(run_id)).interrupts
        # The loop beside the gate writes "total": the worker's commit would refuse this.
        wrong = ActionResult(trigger="ok", data=frozen_map({"total": -1}))
        said = await _raises(post_reply(engine, queue, run_id, gate, wrong), DataConflictError)
        assert "'total'" in said
        assert await queue.replies(run_id) == []  # nothing handed to the worker
        right = ActionResult(trigger="ok")
        before = await post_reply(engine, queue, run_id, gate, right)
        answered = await reply_applied(engine, run_id, gate, before.seq)
    assert answered.nodes["approve"].status is NodeStatus.COMPLETED


async def test_a_reply_refused_where_it_is_applied_leaves_the_drive_going(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with _driven(store_url) as (engine, queue, run_id):
        state = await engine.get(run_id)
        (gate,) = state.interrupts
        # Posted past the check (the run may change between the check and the worker).
        await queue.post_reply(
            run_id, {"interrupt_id": gate, "trigger": "ok", "data": {"total": -1}}
        )
        waiting = reply_applied(engine, run_id, gate, state.seq, within=1.0)
        said = await _raises(waiting, RunStateError)
        assert "not applied in time" in said
        await _settles(lambda: queue.replies(run_id), [])  # looked at, refused, dropped
        steps = (await engine.get(run_id)).nodes["count"].steps
        going = await _until(engine, run_id, lambda s: s.nodes["count"].steps >= steps + 5)
    assert gate in going.interrupts  # still open, for a reply that can be applied


async def test_a_reply_handed_to_the_worker_keeps_its_actor_and_step(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    alice = Actor(name="alice", groups=("release",))
    async with _driven(store_url) as (engine, queue, run_id):
        state = await engine.get(run_id)
        ((gate, interrupt),) = state.interrupts.items()
        ok = ActionResult(trigger="ok")
        stale = post_reply(engine, queue, run_id, gate, ok, actor=alice, step=interrupt.seq - 1)
        said = await _raises(stale, StaleReplyError)
        assert f"the gate pending now was opened at step {interrupt.seq}" in said
        assert await queue.replies(run_id) == []  # nothing handed to the worker
        before = await post_reply(engine, queue, run_id, gate, ok, actor=alice, step=interrupt.seq)
        answered = await reply_applied(engine, run_id, gate, before.seq)
        history = await engine.history(run_id, start=before.seq + 1, stop=answered.seq + 1)
        # The same reply again is refused where it is given: the gate was answered.
        again = post_reply(engine, queue, run_id, gate, ok, actor=alice, step=interrupt.seq)
        assert "answered already" in await _raises(again, GateAnsweredError)
    (reply,) = [record for record in history if record.kind == "reply"]
    assert reply.actor == alice


async def test_a_store_gone_as_the_worker_starts_is_an_outage_it_waits_out(
    store_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with open_store(store_url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        asked = queue.partitions
        calls = 0

        async def away_at_first() -> int:  # the store went between the process's start and this
            nonlocal calls
            calls += 1
            if calls <= 2:
                raise StoreUnavailableError("cannot reach the store: connection refused")
            return await asked()

        monkeypatch.setattr(queue, "partitions", away_at_first)
        worker = Worker(engine, queue, name="w", options=WorkerOptions(reclaim_after=5))
        stop = asyncio.Event()
        with caplog.at_level("INFO", logger="phasegraph.worker"):
            working = asyncio.create_task(worker.run(stop))
            try:
                async with engine.start(SIDE_GATE, {"n": 3, "nap": 0}) as run:
                    run_id = run.run_id
                submitter = work_queue_of(store)  # as another process queues it
                await submitter.enqueue(run_id)
                await submitter.aclose()
                state = await _until(engine, run_id, lambda s: s.nodes["count"].steps >= 3)
            finally:
                stop.set()
                await working
                await queue.aclose()
    assert state.nodes["count"].steps >= 3  # served once the store answered
    lines = [r.getMessage() for r in caplog.records]
    assert sum("the worker retries until the store answers" in line for line in lines) == 1
    assert any(line.startswith("the store answers again") for line in lines)
