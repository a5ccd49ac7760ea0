"""The run driver on real stores: mail between steps, cancels, held leases, wake-ups.

Each test drives a side-gate run (a gate that opens while a counting loop beside it
still works) with a :class:`RunDriver` over the in-process mailbox on a memory and a
SQLite store, and over the work queue's mailbox on a private Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from pathlib import Path

import pytest

from phasegraph import Engine, open_store
from phasegraph.actions import ActionResult
from phasegraph.errors import DataConflictError, LeaseHeldError, PhasegraphError
from phasegraph.model import NodeStatus, RunState, RunStatus, frozen_map
from phasegraph.store import Store
from phasegraph.testing import isolated_redis_url
from phasegraph.worker import work_queue_of
from phasegraph.worker._driver import Driven, RunDriver
from phasegraph.worker._local_mail import LocalMailbox
from phasegraph.worker._mail import QueueMailbox
from phasegraph.worker._mailbox import Cancel, Outcome, Reply

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workers"
SIDE_GATE = FIXTURES / "side_gate.yaml"
_log = logging.getLogger("phasegraph.test.driver")


class _Recording:
    """The in-process mailbox, with the wake-ups asked for written down."""

    def __init__(self, inner: LocalMailbox) -> None:
        self.inner = inner
        self.wakes: list[tuple[str, datetime | None]] = []

    async def replies(self, run_id: str) -> Sequence[Reply]:
        return await self.inner.replies(run_id)

    async def replies_done(self, run_id: str, outcomes: Sequence[Outcome]) -> None:
        await self.inner.replies_done(run_id, outcomes)

    async def cancel_requested(self, run_id: str) -> Cancel | None:
        return await self.inner.cancel_requested(run_id)

    async def cancel_done(self, run_id: str, outcome: Outcome) -> None:
        await self.inner.cancel_done(run_id, outcome)

    async def wake_at(self, run_id: str, when: datetime | None) -> None:
        self.wakes.append((run_id, when))
        await self.inner.wake_at(run_id, when)

    def left(self, run_id: str, why: PhasegraphError) -> None:
        self.inner.left(run_id, why)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as opened:
        yield opened


@pytest.fixture(autouse=True)
def _actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


async def _until(engine: Engine, run_id: str, done: Callable[[RunState], bool]) -> RunState:
    deadline = time.monotonic() + 30
    while not done(state := await engine.get(run_id)):
        assert time.monotonic() < deadline, f"still {state.status} at step {state.seq}"
        await asyncio.sleep(0.02)
    return state


async def _gated(engine: Engine, run_input: dict[str, object]) -> str:
    """A side-gate run started, its id (not driven yet)."""
    async with engine.start(SIDE_GATE, run_input) as run:
        return run.run_id


class _Host:
    """A driver over the in-process mailbox, driving one run in a task."""

    def __init__(self, engine: Engine, *, retry: float = 1.0) -> None:
        self.engine = engine
        self.woken: list[str] = []
        self.mail = _Recording(LocalMailbox(engine.clock, self.woken.append))
        self.driver = RunDriver(engine, self.mail, log=_log, retry=retry)
        self.drive: asyncio.Task[Driven] | None = None

    def start(self, run_id: str) -> None:
        self.drive = asyncio.create_task(self.driver.drive(run_id))

    async def start_until_gate(self, run_id: str) -> str:
        """Drive the run until its gate opens (its loop goes on); the gate's id."""
        self.start(run_id)
        (gate,) = (await _until(self.engine, run_id, lambda s: bool(s.interrupts))).interrupts
        return gate

    def reply(self, run_id: str, gate: str, result: ActionResult) -> asyncio.Future[RunState]:
        done = self.mail.inner.post_reply(run_id, Reply(gate, result))
        assert self.driver.notify(run_id)  # its drive is under way: it looks
        return done

    def cancel(self, run_id: str, reason: str) -> asyncio.Future[RunState]:
        done = self.mail.inner.request_cancel(run_id, reason)
        assert self.driver.notify(run_id)
        return done

    async def aclose(self) -> None:
        if self.drive is not None:
            self.drive.cancel()
            await asyncio.gather(self.drive, return_exceptions=True)
        await self.mail.inner.aclose()
        await self.driver.aclose()


async def test_a_reply_is_applied_between_steps_while_the_loop_beside_it_runs(
    store: Store, tmp_path: Path
) -> None:
    engine, release = Engine(store), tmp_path / "release"
    run_id = await _gated(engine, {"n": 100000, "nap": 0.02, "until": str(release)})
    host = _Host(engine)
    try:
        gate = await host.start_until_gate(run_id)
        answered = await asyncio.wait_for(host.reply(run_id, gate, ActionResult(trigger="ok")), 30)
        assert answered.nodes["approve"].status is NodeStatus.COMPLETED
        assert answered.nodes["count"].status is NodeStatus.RUNNING  # still counting
        release.touch()
        assert host.drive is not None
        driven = await asyncio.wait_for(host.drive, 30)
    finally:
        await host.aclose()
    assert driven.state is not None
    assert driven.state.status is RunStatus.COMPLETED
    records = await engine.history(run_id)
    (reply,) = [r.seq for r in records if r.kind == "reply"]
    assert reply < max(r.seq for r in records if r.node == "count")


async def test_a_reply_refused_in_the_state_reached_is_answered_so_and_the_drive_goes_on(
    store: Store, tmp_path: Path
) -> None:
    engine, release = Engine(store), tmp_path / "release"
    run_id = await _gated(engine, {"n": 100000, "nap": 0.02, "until": str(release)})
    host = _Host(engine)
    try:
        gate = await host.start_until_gate(run_id)
        # The loop beside the gate writes "total": the commit refuses this reply.
        wrong = ActionResult(trigger="ok", data=frozen_map({"total": -1}))
        with pytest.raises(DataConflictError):
            await asyncio.wait_for(host.reply(run_id, gate, wrong), 30)
        steps = (await engine.get(run_id)).nodes["count"].steps
        going = await _until(engine, run_id, lambda s: s.nodes["count"].steps >= steps + 3)
        assert gate in going.interrupts  # still open
        answered = await asyncio.wait_for(host.reply(run_id, gate, ActionResult(trigger="ok")), 30)
        assert answered.nodes["approve"].status is NodeStatus.COMPLETED
    finally:
        release.touch()
        await host.aclose()


async def _look_misses(self: RunDriver, run_id: str, drive: object) -> None:
    return None  # the request is there, but this look does not see it


async def test_a_cancel_request_is_committed_at_the_next_step_boundary(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the drive's look between two steps can see the request.
    monkeypatch.setattr(RunDriver, "_look_for_cancel", _look_misses)
    engine = Engine(store)
    run_id = await _gated(engine, {"n": 100000, "nap": 0.02})
    host = _Host(engine)
    try:
        host.start(run_id)
        await _until(engine, run_id, lambda s: s.nodes["count"].steps >= 3)
        cancelled = await asyncio.wait_for(host.cancel(run_id, "enough"), 30)
        assert host.drive is not None
        driven = await asyncio.wait_for(host.drive, 30)
    finally:
        await host.aclose()
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.nodes["count"].error == "enough"
    assert driven.state == await engine.get(run_id)
    assert host.mail.wakes[-1] == (run_id, None)  # nothing left to wake it for


async def test_a_cancel_request_cuts_a_long_action_short(store: Store) -> None:
    engine = Engine(store)
    run_id = await _gated(engine, {"n": 2, "nap": 3600})  # each count lasts an hour
    host = _Host(engine)
    try:
        host.start(run_id)
        await _until(engine, run_id, lambda s: bool(s.interrupts))  # the count is under way
        cancelled = await asyncio.wait_for(host.cancel(run_id, "enough"), 30)
    finally:
        await host.aclose()
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.nodes["count"].status is NodeStatus.CANCELLED
    assert cancelled.nodes["count"].steps == 0  # its first count never finished


async def test_a_run_held_elsewhere_is_left_for_later_then_taken_once_free(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(store)
    run_id = await _gated(engine, {"n": 3})
    other = await store.acquire(run_id, "another-process", 60.0)
    host = _Host(engine, retry=0.05)
    try:
        with caplog.at_level(logging.INFO, logger=_log.name):
            host.start(run_id)
            done = host.mail.inner.request_cancel(run_id, "enough")  # posted before it looks
            with pytest.raises(LeaseHeldError):
                await asyncio.wait_for(done, 30)  # answered with the refusal
            deadline = time.monotonic() + 30
            while not any("left for later" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
        assert host.drive is not None
        assert not host.drive.done()
        await store.release(other)
        driven = await asyncio.wait_for(host.drive, 30)
    finally:
        await host.aclose()
    # Taken once free and driven to its gate (the cancel was answered, not kept).
    assert driven.state is not None
    assert driven.state.status is RunStatus.WAITING


async def test_a_wake_up_is_asked_for_at_the_deadline_of_a_waiting_run(store: Store) -> None:
    engine = Engine(store)
    run_id = await _gated(engine, {"n": 1})
    host = _Host(engine)
    try:
        host.start(run_id)
        assert host.drive is not None
        driven = await asyncio.wait_for(host.drive, 30)
    finally:
        await host.aclose()
    assert driven.state is not None
    assert driven.state.status is RunStatus.WAITING
    (interrupt,) = driven.state.interrupts.values()
    assert interrupt.deadline is not None
    ((woken, when),) = host.mail.wakes
    assert woken == run_id
    assert when is not None
    assert when > interrupt.deadline


@pytest.mark.redis
async def test_the_queue_mailbox_delivers_the_inbox_and_schedules_the_deadline(
    redis_url: str,
) -> None:
    async with isolated_redis_url(redis_url) as url, open_store(url) as store:
        engine, queue = Engine(store), work_queue_of(store)
        try:
            run_id = await _gated(engine, {"n": 1})
            async with engine.open(run_id) as run:  # to its gate
                await run.drive()
                (gate,) = run.state.interrupts
            # A refused reply, then the right one: read from the inbox when the run opens.
            await queue.post_reply(run_id, {"interrupt_id": gate, "trigger": "nope"})
            await queue.post_reply(run_id, {"interrupt_id": gate, "trigger": "fail"})
            await queue.schedule(run_id, 1)
            driver = RunDriver(engine, QueueMailbox(queue), log=_log)
            driven = await driver.drive(run_id)
            assert driven.state is not None
            assert driven.state.nodes["approve"].status is NodeStatus.FAILED
            assert await queue.replies(run_id) == []  # both dealt with
            assert await queue.deadline(run_id) is None  # finished: nothing to wake
            second = await _gated(engine, {"n": 1})
            waiting = (await driver.drive(second)).state
            assert waiting is not None
            assert waiting.status is RunStatus.WAITING
            (interrupt,) = waiting.interrupts.values()
            assert interrupt.deadline is not None
            due = await queue.deadline(second)
            assert due is not None
            assert due > interrupt.deadline.timestamp() * 1000
        finally:
            await queue.aclose()


async def test_a_run_whose_graph_file_changed_is_driven_as_it_began_and_can_be_cancelled(
    store: Store, tmp_path: Path
) -> None:
    for name in ("side_gate.yaml", "timed_gate.yaml"):
        (tmp_path / name).write_text((FIXTURES / name).read_text(encoding="utf-8"))
    graph = tmp_path / "side_gate.yaml"
    engine = Engine(store)
    async with engine.start(graph, {"n": 1}) as run:
        run_id = run.run_id
    graph.write_text(graph.read_text(encoding="utf-8").replace("go on?", "go on now?"))
    host = _Host(Engine(store))  # another process: it has only the store
    try:
        waiting = (await host.driver.drive(run_id)).state
        assert waiting is not None
        assert waiting.status is RunStatus.WAITING
        (gate,) = waiting.interrupts.values()
        assert gate.payload["question"] == "go on?"  # the definition it started with
        cancelled = host.mail.inner.request_cancel(run_id, "not needed")
        driven = await asyncio.wait_for(host.driver.drive(run_id), 30)
        assert (await cancelled).status is RunStatus.CANCELLED
    finally:
        await host.aclose()
    assert driven.state is not None
    assert driven.state.status is RunStatus.CANCELLED
