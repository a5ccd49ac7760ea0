"""A message queued on a run that a worker drives reaches it (on Redis, server and cluster).

The worker runs in this process; the chat's answer waits until the test lets it go
(``slowbot``), so the message is sent while the worker is busy with the run, for sure.
Sending is what ``serve --queue`` and ``phasegraph send`` do with a work queue: keep the
message in the run's inbox, then queue the run, which wakes the worker driving it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from phasegraph import Engine, open_store
from phasegraph.model import RunState, RunStatus
from phasegraph.spec import load_graph
from phasegraph.worker import Worker, WorkerOptions, WorkQueue, work_queue_of

pytestmark = pytest.mark.redis

MESSAGES = Path(__file__).resolve().parent.parent / "fixtures" / "messages"


@pytest.fixture
def slowbot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    shutil.copy(MESSAGES / "slowbot.py", tmp_path / "slowbot.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    import slowbot  # type: ignore[import-not-found]

    slowbot.started.clear()
    slowbot.answers = asyncio.Semaphore(0)
    return slowbot


def _graph(tmp_path: Path, policy: str) -> Path:
    text = (MESSAGES / "chat.yaml").read_text().replace("chatbot:think", "slowbot:think")
    graph = tmp_path / f"chat_{policy}.yaml"
    graph.write_text(text.replace("busy: enqueue", f"busy: {policy}"))
    return graph


@asynccontextmanager
async def _worker(store_url: str) -> AsyncIterator[tuple[Engine, WorkQueue]]:
    async with open_store(store_url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        worker = Worker(engine, queue, name="w", options=WorkerOptions(reclaim_after=5))
        stop = asyncio.Event()
        working = asyncio.create_task(worker.run(stop))
        try:
            yield engine, queue
        finally:
            stop.set()
            await working
            await queue.aclose()


async def _send(engine: Engine, queue: WorkQueue, run_id: str, text: str) -> None:
    await engine.post_message(run_id, {"text": text})
    await queue.enqueue(run_id)  # the wake-up of the worker driving it


async def _until(engine: Engine, run_id: str, done: Callable[[RunState], bool]) -> RunState:
    deadline = time.monotonic() + 30
    while not done(state := await engine.get(run_id)):
        assert time.monotonic() < deadline, f"still {state.status} at step {state.seq}"
        await asyncio.sleep(0.02)
    return state


async def _started(slowbot: object, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(slowbot.started) < count:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


async def test_a_message_sent_while_a_worker_thinks_is_answered_next(
    store_url: str, slowbot: object, tmp_path: Path
) -> None:
    async with _worker(store_url) as (engine, queue):
        async with engine.start(load_graph(_graph(tmp_path, "enqueue")), {}) as run:
            run_id = run.run_id
        await _send(engine, queue, run_id, "one")
        await _started(slowbot, 1)  # the worker holds the run, thinking about "one"
        await _send(engine, queue, run_id, "two")
        slowbot.answers.release()  # type: ignore[attr-defined]
        await _started(slowbot, 2)
        slowbot.answers.release()  # type: ignore[attr-defined]
        state = await _until(engine, run_id, lambda s: len(s.data.get("said", ())) == 2)
    assert state.data["said"] == ["one", "two"]
    assert state.status is RunStatus.WAITING
    assert slowbot.started == ["one", "two"]  # type: ignore[attr-defined]


async def test_an_interrupting_message_cuts_the_workers_turn_short(
    store_url: str, slowbot: object, tmp_path: Path
) -> None:
    async with _worker(store_url) as (engine, queue):
        async with engine.start(load_graph(_graph(tmp_path, "interrupt")), {}) as run:
            run_id = run.run_id
        await _send(engine, queue, run_id, "one")
        await _started(slowbot, 1)
        await _send(engine, queue, run_id, "two")
        await _started(slowbot, 2)  # "one" was cut short: nothing let it answer
        slowbot.answers.release()  # type: ignore[attr-defined]
        state = await _until(engine, run_id, lambda s: s.data.get("said") is not None)
    assert state.data["said"] == ["two"]
    assert slowbot.started == ["one", "two"]  # type: ignore[attr-defined]
