"""Worker processes on one store: runs spread over them, survive a SIGKILL, end as if alone.

Real parts only: a private redis-server (and a private three-primary Redis Cluster: each
test runs on both), ``phasegraph worker`` processes started with the console script, runs
submitted and answered as a user's program would (``Engine`` plus the store's work queue,
as ``run --detach`` and ``reply --detach`` do).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.model import RunState, RunStatus
from phasegraph.store import Store
from phasegraph.worker import work_queue_of

pytestmark = pytest.mark.redis

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workers"
LOOP_GATE = FIXTURES / "loop_gate.yaml"
RECLAIM_AFTER = 2.0  # seconds: how soon a dead worker's runs move in these tests


@contextlib.contextmanager
def workers(
    url: str,
    count: int,
    marks: Path,
    *,
    concurrency: int = 8,
    quiet: bool = True,
    env: Mapping[str, str] | None = None,
    reclaim_after: float = RECLAIM_AFTER,
    first: int = 0,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes on ``url``; each action call appends a line to ``marks``.

    They are named ``w<i>`` from ``w<first>`` on; their logs are ``worker<i>.log`` beside
    ``marks`` (warnings only when ``quiet``); ``env`` adds to their environment.
    """
    env = {**os.environ, **(env or {}), "PHASEGRAPH_TEST_MARKS": str(marks)}
    numbers = range(first, first + count)
    logs = [(marks.parent / f"worker{i}.log").open("ab") for i in numbers]
    procs = [
        subprocess.Popen(
            cli_argv(
                "worker",
                "--store",
                url,
                "--name",
                f"w{first + i}",
                "--concurrency",
                str(concurrency),
                "--reclaim-after",
                str(reclaim_after),
                *(["--quiet"] if quiet else []),
            ),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=logs[i],
        )
        for i in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


async def submit(engine: Engine, graph: Path, run_input: dict[str, Any], count: int) -> list[str]:
    """Create ``count`` runs and queue them, as ``phasegraph run --detach`` does."""
    queue = work_queue_of(engine.store)
    try:
        run_ids = []
        for _ in range(count):
            async with engine.start(graph, run_input) as run:
                run_ids.append(run.run_id)
            await queue.enqueue(run_ids[-1])
        return run_ids
    finally:
        await queue.aclose()


async def answer(engine: Engine, run_ids: list[str], trigger: str) -> None:
    """Answer each run's gate and queue it, as ``phasegraph reply --detach`` does."""
    queue = work_queue_of(engine.store)
    try:
        for run_id in run_ids:
            state = await engine.get(run_id)
            (gate,) = state.interrupts
            await engine.reply(run_id, gate, trigger, drive=False)
            await queue.enqueue(run_id)
    finally:
        await queue.aclose()


async def wait_for(
    store: Store, run_ids: list[str], status: RunStatus, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Until every run is in ``status`` (fails early if every worker died)."""
    wanted = set(run_ids)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        metas = await store.list_runs(status=str(status), limit=len(run_ids) + 100)
        if wanted <= {meta.run_id for meta in metas}:
            return
        assert any(proc.poll() is None for proc in procs), "every worker died (see worker*.log)"
        await asyncio.sleep(0.2)
    metas = await store.list_runs(limit=len(run_ids) + 100)
    counts = collections.Counter(meta.status for meta in metas if meta.run_id in wanted)
    pytest.fail(f"runs not all {status} after 180 s: {dict(counts)}")


def shape(engine_history: list[Any]) -> list[tuple[Any, ...]]:
    """A run's steps without times and ids: what an uninterrupted run must match."""
    return [
        (r.seq, r.kind, r.node, r.trigger, r.source, r.dest, dict(r.data), r.status)
        for r in engine_history
    ]


async def reference(graph: Path, run_input: dict[str, Any], trigger: str) -> tuple[Any, ...]:
    """The same work driven in one process on a memory store, never interrupted."""
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(graph, run_input)
        (gate,) = state.interrupts
        state = await engine.reply(state.run_id, gate, trigger)
        return (state.status, dict(state.data), shape(await engine.history(state.run_id)))


def assert_no_errors_logged(folder: Path) -> None:
    """No worker met an unexpected failure (a drive that crashed is logged as an ERROR)."""
    for log in sorted(folder.glob("worker*.log")):
        assert b" ERROR " not in log.read_bytes(), log.read_text()[-3000:]


def started_by(marks: Path, pid: int) -> int:
    """How many actions the process ``pid`` started."""
    if not marks.exists():
        return 0
    return sum(line.endswith(b" %d" % pid) for line in marks.read_bytes().splitlines())


async def pending_of(url: str, store: Any, consumer: str) -> int:
    """Entries ``consumer`` took and has not acknowledged."""
    client = store.queue_client()
    try:
        key = f"{store.prefix}:{{q0}}:work"
        rows = await client.xpending_range(key, "workers", "-", "+", 10_000, consumer)
        return len(rows)
    finally:
        await client.aclose()


async def test_three_workers_survive_a_sigkill_and_end_as_an_uninterrupted_run(
    store_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    run_input = {"n": 4, "nap": 0.05}
    expected = await reference(LOOP_GATE, run_input, "ok")
    async with open_store(store_url) as store:
        engine = Engine(store)
        with workers(store_url, 3, marks) as procs:
            run_ids = await submit(engine, LOOP_GATE, run_input, 300)
            # Kill a worker in the thick of it: it started a few dozen actions, and its
            # runs spend most of their time inside one.
            deadline = time.monotonic() + 60
            while started_by(marks, procs[0].pid) < 40:
                assert time.monotonic() < deadline, "worker w0 never got going"
                await asyncio.sleep(0.05)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            held = await pending_of(store_url, store, "w0")
            assert held > 0
            await wait_for(store, run_ids, RunStatus.WAITING, procs[1:])
            # Its entries moved to the living workers, and every run reached the gate.
            assert await pending_of(store_url, store, "w0") == 0
            await answer(engine, run_ids, "ok")
            await wait_for(store, run_ids, RunStatus.COMPLETED, procs[1:])
        for run_id in run_ids:
            state = await engine.get(run_id)
            got = (state.status, dict(state.data), shape(await engine.history(run_id)))
            assert got == expected, run_id
    # At least once, committed once: each action's key ran; only the steps in flight when
    # w0 died ran twice (at most one per run, never more than w0 was driving), each
    # attempt under its own fencing token.
    attempts: dict[str, list[str]] = collections.defaultdict(list)
    for line in marks.read_text().splitlines():
        key, token, _ = line.split(" ")
        attempts[key].append(token)
    for run_id in run_ids:
        for step in range(4):
            assert attempts[f"{run_id}:count:{step}"], (run_id, step)
        assert attempts[f"{run_id}:finish:0"], run_id
    repeated = {key: tokens for key, tokens in attempts.items() if len(tokens) > 1}
    assert 1 <= len(repeated) <= 8  # w0 was mid-action; never more than its concurrency
    assert all(len(tokens) == 2 and len(set(tokens)) == 2 for tokens in repeated.values())
    runs_repeating = collections.Counter(key.rsplit(":", 2)[0] for key in repeated)
    assert all(count == 1 for count in runs_repeating.values())
    assert_no_errors_logged(tmp_path)


async def test_a_killed_workers_run_moves_once_its_lease_allows_not_after_reclaim_after(
    store_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    run_input = {"n": 3, "nap": 0.3}
    # The fixed wait is far beyond the test: only the free lease can move the run.
    env = {"PHASEGRAPH_LEASE_TTL": "2"}
    async with open_store(store_url) as store:
        engine = Engine(store)
        with workers(store_url, 2, marks, env=env, reclaim_after=3600) as procs:
            (run_id,) = await submit(engine, LOOP_GATE, run_input, 1)
            deadline = time.monotonic() + 60
            while not any(started_by(marks, proc.pid) for proc in procs):
                assert time.monotonic() < deadline, "no worker got going"
                await asyncio.sleep(0.05)
            driver, other = procs if started_by(marks, procs[0].pid) else procs[::-1]
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            before = started_by(marks, other.pid)
            await wait_for(store, [run_id], RunStatus.WAITING, [other])
            assert started_by(marks, other.pid) > before  # the living worker finished it


async def test_a_deadline_fires_in_whichever_worker_is_alive(
    store_url: str, tmp_path: Path
) -> None:
    async with open_store(store_url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        try:
            with workers(store_url, 1, tmp_path / "marks.txt") as procs:
                (run_id,) = await submit(engine, FIXTURES / "loop_deadline.yaml", {"n": 2}, 1)
                await wait_for(store, [run_id], RunStatus.WAITING, procs)
                # Waiting, it holds no worker: only its deadline is recorded.
                assert await queue.deadline(run_id) is not None
                # That worker goes; another fires the deadline.
                procs[0].send_signal(signal.SIGTERM)
                procs[0].wait(timeout=20)
                with workers(store_url, 1, tmp_path / "marks.txt") as later:
                    await wait_for(store, [run_id], RunStatus.COMPLETED, later)
            state: RunState = await engine.get(run_id)
            assert state.nodes["approve"].state == "expired"
            assert state.data["result"] == "total 3"
            assert await queue.deadline(run_id) is None
        finally:
            await queue.aclose()
