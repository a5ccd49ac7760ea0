"""SIGKILL chaos on Postgres: 30 runs, 60 kills of the processes driving them, 0 lost, 0 redone.

Three groups of ten runs of the crash graph, each group driven by one process at a time
(its runs concurrently, their commits sharing the store's pool). A group's process is
SIGKILLed once its runs committed a few more steps, and a new one started, which resumes
them (the dead process's leases are taken over at once: its holder is provably gone),
twenty times per group; then a last process ends every run. Each run must then equal an
uninterrupted run (nothing lost), and an action may have run again only for a step that
was in flight, uncommitted, at a kill (nothing redone).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from test_postgres_faults import GRAPH, in_flight, settled

from phasegraph import Engine, open_store
from phasegraph.errors import RunNotFoundError
from phasegraph.model import RunState, RunStatus
from phasegraph.store.memory import MemoryStore
from postgres_kit import isolated_postgres_url, libpq_url

GROUPS, RUNS, KILLS = 3, 10, 20  # 30 runs, 60 kills
LOOPS, DELAY = 14, 0.03  # 57 steps a run: work left for every kill, on a busy machine too
STEPS_BEFORE_KILL = 3  # commits a group's process makes (at least) before it is killed

# Drives the runs named on the command line until each completes: starts those not
# created yet, resumes the others (an ended one is left alone).
_DRIVER = """
import asyncio, sys
from phasegraph import Engine, open_store
from phasegraph.errors import RunNotFoundError

async def drive(engine, graph, run_id, log, loops, delay):
    try:
        state = await engine.get(run_id)
    except RunNotFoundError:
        inputs = {"log": log, "loops": loops, "delay": delay}
        return await engine.run(graph, inputs, run_id=run_id)
    if state.status.value == "running":
        return await engine.resume(run_id, graph=graph)

async def main(url, graph, loops, delay, pairs):
    async with open_store(url) as store:
        engine = Engine(store)
        await asyncio.gather(*(
            drive(engine, graph, run_id, log, loops, delay)
            for run_id, log in zip(pairs[::2], pairs[1::2])
        ))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]))
"""


def _marks(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


class _Group:
    """Ten runs and the process driving them now."""

    def __init__(self, index: int, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.run_ids = [f"chaos-{index}-{n}" for n in range(RUNS)]
        self.logs = [workdir / f"log-{run_id}.txt" for run_id in self.run_ids]
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.stops: dict[str, list[RunState]] = {run_id: [] for run_id in self.run_ids}
        self.since = 0

    def start(self, conn: psycopg.Connection[tuple[int]]) -> None:
        pairs = [str(item) for pair in zip(self.run_ids, self.logs, strict=True) for item in pair]
        argv = [sys.executable, "-c", _DRIVER, self.url, str(GRAPH), str(LOOPS), str(DELAY)]
        self.since = self.committed(conn)
        self.process = subprocess.Popen(
            [*argv, *pairs], cwd=GRAPH.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def committed(self, conn: psycopg.Connection[tuple[int]]) -> int:
        row = conn.execute(
            b"SELECT count(*) FROM records WHERE run_id = ANY(%s)", (self.run_ids,)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def running(self) -> bool:
        assert self.process is not None
        return self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.communicate()
        self.kills += 1
        for run_id, state in asyncio.run(_states(self.url, self.run_ids)).items():
            self.stops[run_id].append(state)


async def _states(url: str, run_ids: list[str]) -> dict[str, RunState]:
    async with open_store(url) as store:
        engine = Engine(store)
        states = {}
        for run_id in run_ids:
            with contextlib.suppress(RunNotFoundError):  # not created when the process died
                states[run_id] = await engine.get(run_id)
        return states


@pytest.fixture
def chaos_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[RunState, Counter[str]]:
    monkeypatch.syspath_prepend(str(GRAPH.parent))
    log = tmp_path / "reference.txt"

    async def scenario() -> RunState:
        async with MemoryStore() as store:
            return await Engine(store).run(GRAPH, {"log": str(log), "loops": LOOPS})

    return asyncio.run(scenario()), _marks(log)


def test_sixty_sigkills_over_thirty_runs_lose_nothing_and_redo_nothing(
    postgres_url: str, chaos_reference: tuple[RunState, Counter[str]], tmp_path: Path
) -> None:
    with isolated_postgres_url(postgres_url) as url:
        asyncio.run(_migrated(url))
        groups = [_Group(index, url, tmp_path) for index in range(GROUPS)]
        schema = dict(parse_qsl(urlsplit(url).query))["schema"]
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"'.encode())
            try:
                _kill_and_restart(groups, conn)
            finally:
                for group in groups:  # each pipe closed, a process that ended early's too
                    if group.process is not None:
                        if group.running():
                            group.process.kill()
                        group.process.communicate()
        finals = asyncio.run(_states(url, [r for g in groups for r in g.run_ids]))
    assert sum(group.kills for group in groups) >= 60
    interrupted = again = 0
    for group in groups:
        for run_id, log in zip(group.run_ids, group.logs, strict=True):
            final, stops = finals[run_id], group.stops[run_id]
            assert final.status is RunStatus.COMPLETED, run_id  # nothing lost ...
            # ... and settled() fails if a step differs or a committed step's action ran
            # again; only actions in flight at a kill did (once per such kill at most).
            again += settled(final, _marks(log), chaos_reference, stops)
            interrupted += sum(bool(in_flight(stop)) for stop in stops)
    assert interrupted >= 60  # the kills fell mid-run, with actions in flight
    assert again <= interrupted * 2  # at most the in-flight actions (concurrency 2)


async def _migrated(url: str) -> None:
    async with open_store(url) as store:
        await store.migrate()  # type: ignore[attr-defined]


def _kill_and_restart(groups: list[_Group], conn: psycopg.Connection[tuple[int]]) -> None:
    """Kill each group's process after a few commits, :data:`KILLS` times; then let it end."""
    for group in groups:
        group.start(conn)
    deadline = time.monotonic() + 300
    while any(group.kills < KILLS for group in groups):
        assert time.monotonic() < deadline, "the chaos did not get through its kills"
        for group in groups:
            if group.kills >= KILLS:
                continue
            if not group.running():
                pytest.fail(f"a driver ended before its kill: {group.process!r}")
            if group.committed(conn) >= group.since + STEPS_BEFORE_KILL:
                group.kill()
                group.start(conn)
        time.sleep(0.005)
    for group in groups:
        assert group.process is not None
        _, err = group.process.communicate(timeout=120)
        assert group.process.returncode == 0, err.decode(errors="replace")[-3000:]
