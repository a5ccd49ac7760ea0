"""A cancel request reaches the run a worker drives, even when the worker's first look fails.

In one process on a private Redis (server and cluster): the worker is the real one, but
its immediate look at a new entry's cancel request is made to miss (as a store blip or a
drive between two of its tasks would make it), so only the look between two steps is left.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from phasegraph import Engine, open_store
from phasegraph.model import NodeStatus, RunStatus
from phasegraph.worker import Worker, WorkerOptions, work_queue_of

pytestmark = pytest.mark.redis

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workers"
SIDE_GATE = FIXTURES / "side_gate.yaml"


class _LookMisses(Worker):
    async def _look_for_cancel(self, run_id: str) -> None:
        return None  # the request is there, but this look does not see it


async def test_a_cancel_the_first_look_missed_stops_the_run_at_its_next_step(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with open_store(store_url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        worker = _LookMisses(engine, queue, name="w", options=WorkerOptions(reclaim_after=5))
        stop = asyncio.Event()
        working = asyncio.create_task(worker.run(stop))
        try:
            async with engine.start(SIDE_GATE, {"n": 100000, "nap": 0.02}) as run:
                run_id = run.run_id
            await queue.enqueue(run_id)
            deadline = time.monotonic() + 30
            while (await engine.get(run_id)).nodes["count"].steps < 5:
                assert time.monotonic() < deadline, "the worker never drove the run"
                await asyncio.sleep(0.05)
            await queue.request_cancel(run_id, "enough")
            while (state := await engine.get(run_id)).status is not RunStatus.CANCELLED:
                assert time.monotonic() < deadline, f"still {state.status} at {state.seq}"
                await asyncio.sleep(0.05)
            assert await queue.cancel_requested(run_id) is None  # done with, not left
        finally:
            stop.set()
            await working
            await queue.aclose()
    # Cancelled where it stood, long before its loop would have spent its budget.
    assert state.nodes["count"].status is NodeStatus.CANCELLED
    assert state.nodes["count"].error == "enough"
