"""Worker processes on a Postgres store: a SIGKILLed worker and a restarted server lose nothing.

Real parts only, as the Redis worker tests: ``phasegraph worker`` processes started with
the console script on a private Postgres (its own cluster, so it can be restarted), runs
submitted and answered as ``run --detach`` and ``reply --detach`` do. The queue is the
store's own table, taken with ``SKIP LOCKED`` and woken by ``NOTIFY``.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from pathlib import Path

from test_workers import (
    LOOP_GATE,
    answer,
    assert_no_errors_logged,
    reference,
    shape,
    started_by,
    submit,
    wait_for,
    workers,
)

from phasegraph import Engine, open_store
from phasegraph.model import RunStatus
from phasegraph.store.postgres import PostgresStore
from phasegraph.worker import work_queue_of
from postgres_kit import RestartablePostgres, isolated_postgres_url

OUTAGE = "the worker retries until the store answers"
BACK = "the store answers again"


async def _logged(log: Path, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in log.read_text():  # noqa: ASYNC240 - a small file, read at once
        assert time.monotonic() < deadline, f"{text!r} never logged in {log}"
        await asyncio.sleep(0.05)


async def _taken_by(store: PostgresStore, consumer: str) -> int:
    queue = store.work_queue()
    try:
        return await queue.pending(consumer)
    finally:
        await queue.aclose()


async def test_three_workers_a_sigkill_and_a_postgres_restart_end_as_an_uninterrupted_run(
    pg_server: RestartablePostgres, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    run_input = {"n": 4, "nap": 0.05}
    expected = await reference(LOOP_GATE, run_input, "ok")
    env = {"PHASEGRAPH_LEASE_TTL": "3"}  # drives cut off by the restart are free again soon
    url = pg_server.url
    logs = [tmp_path / f"worker{i}.log" for i in range(3)]
    async with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        engine = Engine(store)
        with workers(url, 3, marks, quiet=False, env=env) as procs:
            run_ids = await submit(engine, LOOP_GATE, run_input, 60)
            deadline = time.monotonic() + 60
            while started_by(marks, procs[0].pid) < 10:
                assert time.monotonic() < deadline, "worker w0 never got going"
                await asyncio.sleep(0.05)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            assert await _taken_by(store, "w0") > 0  # it died holding work
            # The server goes away while the other two are in the middle of theirs, and
            # stays away until each has said so (a call shorter than the pool's wait for
            # a connection would only be slow, not fail).
            pg_server.kill()
            for log in logs[1:]:
                await _logged(log, OUTAGE)
            pg_server.start()
            await wait_for(store, run_ids, RunStatus.WAITING, procs[1:])
            assert await _taken_by(store, "w0") == 0  # its rows moved to the living
            await answer(engine, run_ids, "ok")
            await wait_for(store, run_ids, RunStatus.COMPLETED, procs[1:])
            for log in logs[1:]:
                await _logged(log, BACK)
        for run_id in run_ids:
            state = await engine.get(run_id)
            got = (state.status, dict(state.data), shape(await engine.history(run_id)))
            assert got == expected, run_id
    # At least once, committed once: every step's action ran; an action ran again only
    # for a step in flight when w0 died or the server went, each attempt under a token
    # of its own, and at most once per run.
    attempts: dict[str, list[str]] = collections.defaultdict(list)
    for line in marks.read_text().splitlines():
        key, token, _ = line.split(" ")
        attempts[key].append(token)
    for run_id in run_ids:
        for step in range(4):
            assert attempts[f"{run_id}:count:{step}"], (run_id, step)
        assert attempts[f"{run_id}:finish:0"], run_id
    repeated = {key: tokens for key, tokens in attempts.items() if len(tokens) > 1}
    assert all(len(set(tokens)) == len(tokens) for tokens in repeated.values())
    assert len(repeated) <= 3 * 8  # w0's drives, and the two others' when the server went
    assert_no_errors_logged(tmp_path)
    for log in logs[1:]:
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert OUTAGE in text, text[-3000:]
        assert BACK in text[text.index(OUTAGE) :], text[-3000:]


async def test_a_worker_started_while_postgres_is_down_waits_for_it_then_serves(
    pg_server: RestartablePostgres, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    log = tmp_path / "worker0.log"
    pg_server.kill()
    with workers(pg_server.url, 1, marks, quiet=False) as procs:
        await _logged(log, OUTAGE)
        assert procs[0].poll() is None, log.read_text()  # it waits, it does not give up
        assert "partition(s)" not in log.read_text()  # nor says it serves before it can
        pg_server.start()
        async with open_store(pg_server.url) as store:
            engine = Engine(store)
            run_ids = await submit(engine, LOOP_GATE, {"n": 1, "nap": 0}, 1)
            await wait_for(store, run_ids, RunStatus.WAITING, procs)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.index(OUTAGE) < text.index(BACK) < text.index("partition(s)"), text


async def test_a_deadline_fires_in_whichever_worker_is_alive(
    postgres_url: str, tmp_path: Path
) -> None:
    fixtures = LOOP_GATE.parent
    with isolated_postgres_url(postgres_url) as url:
        async with open_store(url) as store:
            engine = Engine(store)
            queue = work_queue_of(store)
            try:
                with workers(url, 1, tmp_path / "marks.txt") as procs:
                    (run_id,) = await submit(engine, fixtures / "loop_deadline.yaml", {"n": 2}, 1)
                    await wait_for(store, [run_id], RunStatus.WAITING, procs)
                    assert await queue.deadline(run_id) is not None  # type: ignore[attr-defined]
                    procs[0].send_signal(signal.SIGTERM)
                    procs[0].wait(timeout=20)
                    with workers(url, 1, tmp_path / "marks.txt") as later:
                        await wait_for(store, [run_id], RunStatus.COMPLETED, later)
                state = await engine.get(run_id)
                assert state.nodes["approve"].state == "expired"
                assert await queue.deadline(run_id) is None  # type: ignore[attr-defined]
            finally:
                await queue.aclose()
