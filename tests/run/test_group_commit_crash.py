"""Crash-resume of concurrent runs sharing SQLite group commits, in a real process.

Several runs step concurrently in one process on one SQLite file, so their commits share
transactions. The process is SIGKILLed mid-way; each run must then resume to exactly the
outcome of an uninterrupted run, and no committed step's action may have run twice.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from builders import TESTS, sqlite_db
from phasegraph import Engine, open_store
from phasegraph.model import NodeStatus, RunState, RunStatus
from phasegraph.store.memory import MemoryStore

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"
RUNS, LOOPS, DELAY = 4, 4, "0.03"

_DRIVER = """
import asyncio, sys
from phasegraph import Engine, open_store

async def main(url, graph, loops, delay, logs):
    async with open_store(url) as store:
        engine = Engine(store)
        await asyncio.gather(*(
            engine.run(graph, {"log": log, "loops": loops, "delay": delay}, run_id=f"run-{n}")
            for n, log in enumerate(logs)
        ))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]))
"""


def _marks(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


def _committed(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(db, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # the tables are not created yet
        return 0
    finally:
        conn.close()


async def _reference(log: Path) -> RunState:
    async with MemoryStore() as store:
        return await Engine(store).run(GRAPH, {"log": str(log), "loops": LOOPS})


async def _states(url: str) -> list[RunState]:
    async with open_store(url) as store:
        engine = Engine(store)
        return [await engine.get(f"run-{n}") for n in range(RUNS)]


async def _resume_all(url: str) -> list[RunState]:
    async with open_store(url) as store:
        engine = Engine(store)
        return [await engine.resume(f"run-{n}", graph=GRAPH) for n in range(RUNS)]


def test_sigkill_during_group_commits_then_each_run_resumes_exactly(tmp_path: Path) -> None:
    expected = asyncio.run(_reference(tmp_path / "reference.txt"))
    expected_marks = _marks(tmp_path / "reference.txt")
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    logs = [tmp_path / f"log-{n}.txt" for n in range(RUNS)]
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, url, str(GRAPH), str(LOOPS), DELAY, *map(str, logs)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        total = RUNS * (expected.seq + 1)
        deadline = time.monotonic() + 30
        while _committed(db) < total // 2:
            assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
            assert time.monotonic() < deadline, "timed out waiting for commits"
            time.sleep(0.005)
        driver.kill()
        driver.wait()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if driver.stderr is not None:
            driver.stderr.close()
    at_kill = asyncio.run(_states(url))
    assert any(state.status is RunStatus.RUNNING for state in at_kill)
    with sqlite_db(db) as conn:  # the killed writer's leases run out now
        conn.execute("UPDATE runs SET lease_expires = 0")
    finals = asyncio.run(_resume_all(url))
    for log, killed, final in zip(logs, at_kill, finals, strict=True):
        assert final.status is RunStatus.COMPLETED
        assert (final.data, final.seq) == (expected.data, expected.seq)
        marks = _marks(log)
        assert set(marks) == set(expected_marks)
        for mark in (mark for mark, count in marks.items() if count > 1):
            # Only an action whose step was not committed when the process died runs again.
            node_id, steps = mark.split(":")
            assert marks[mark] == 2, mark
            assert killed.nodes[node_id].status is NodeStatus.RUNNING, mark
            assert killed.nodes[node_id].steps == int(steps), mark


@pytest.fixture(autouse=True)
def _crash_actions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process reference and resumes import the graph's actions from beside it."""
    monkeypatch.syspath_prepend(str(GRAPH.parent))
