"""A Redis restart under worker processes: one line each, and every run goes on.

Real parts only: a private redis-server that keeps every write across a restart (its
append-only file), ``phasegraph worker`` processes started with the console script, runs
submitted and answered as ``run --detach`` and ``reply --detach`` do. The server is
stopped while runs are in the middle of their work and started again on the same port.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_workers import LOOP_GATE, answer, submit, wait_for, workers

from phasegraph import Engine, open_store
from phasegraph.errors import StoreUnavailableError
from phasegraph.model import RunStatus
from phasegraph.store import Store
from redis_kit import RestartableRedis

pytestmark = pytest.mark.redis

OUTAGE = "the worker retries until the store answers"
BACK = "the store answers again"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestartableRedis]:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    one = RestartableRedis(redis_dir)
    one.start()
    yield one
    one.stop()


async def _logged(log: Path, text: str) -> None:
    """Until ``log`` holds ``text``."""
    deadline = time.monotonic() + 30
    while text not in log.read_text():  # noqa: ASYNC240 - a small file, read at once
        assert time.monotonic() < deadline, f"{text!r} never logged in {log}"
        await asyncio.sleep(0.05)


async def _unreachable(store: Store) -> None:
    """Until this process's own connection has seen the store go (so it opens a new one)."""
    while True:
        try:
            await store.list_runs(limit=1)
        except StoreUnavailableError:
            return
        await asyncio.sleep(0.05)


async def _stepping(engine: Engine, run_ids: list[str]) -> None:
    """Until each run has taken a few steps (its worker is in the middle of it)."""
    deadline = time.monotonic() + 60
    for run_id in run_ids:
        while (await engine.get(run_id)).nodes["count"].steps < 3:
            assert time.monotonic() < deadline, f"run {run_id} never got going"
            await asyncio.sleep(0.05)


async def test_a_redis_restart_under_workers_is_one_line_each_and_every_run_completes(
    server: RestartableRedis, tmp_path: Path
) -> None:
    marks, release = tmp_path / "marks.txt", tmp_path / "release"
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    env = {"PHASEGRAPH_LEASE_TTL": "5"}  # a drive cut off by the outage is free again soon
    async with open_store(server.url) as store:
        engine = Engine(store)
        with workers(server.url, 2, marks, quiet=False, env=env) as procs:
            for i, log in enumerate(logs):  # each has started (a start-up needs the store)
                await _logged(log, f"worker w{i} on ")
            # Runs the workers are done with (their connections now idle in the pools) ...
            waiting = await submit(engine, LOOP_GATE, {"n": 2}, 6)
            await wait_for(store, waiting, RunStatus.WAITING, procs)
            # ... and runs in the middle of their work, which loop until released.
            loop_input = {"n": 10_000, "nap": 0.02, "until": str(release)}
            moving = await submit(engine, LOOP_GATE, loop_input, 4)
            await _stepping(engine, moving)

            server.stop()
            await _unreachable(store)
            for log in logs:
                await _logged(log, "cannot reach Redis")
            server.start()

            # Work taken after the restart, on connections the old server closed.
            later = await submit(engine, LOOP_GATE, {"n": 2}, 6)
            release.touch()
            runs = [*waiting, *moving, *later]
            await wait_for(store, runs, RunStatus.WAITING, procs)
            await answer(engine, runs, "ok")
            await wait_for(store, runs, RunStatus.COMPLETED, procs)
            for log in logs:
                _no_failure_logged(log)
                await _logged(log, BACK)
    for log in logs:
        text = _no_failure_logged(log)
        assert OUTAGE in text, text[-3000:]
        # One line said the store was away and that the worker retries; one that it is back.
        assert BACK in text[text.index(OUTAGE) :], text[-3000:]


def _no_failure_logged(log: Path) -> str:
    """The log, which shows no traceback and no error."""
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert " ERROR " not in text, text[-3000:]
    return text
