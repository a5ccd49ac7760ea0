"""Child runs spread over worker processes: a map of 1,000 items, three workers, five kills.

Real parts only: a private redis-server, ``phasegraph worker`` processes started with the
console script and killed with SIGKILL while the children run (each restarted under a
new name), the parent submitted as ``phasegraph run --detach`` does. Each of the map's
1,000 items is a child run of its own (``tests/fixtures/children``); the parent must
complete with every result once, in item order, and every child run must have ended
exactly once, counted in what the store committed, not in what any process said.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.model import RunStatus, StepRecord
from phasegraph.run._children import CHILD_RUN
from phasegraph.store import Store
from phasegraph.store._holder import owner_label
from phasegraph.testing import isolated_redis_url
from phasegraph.worker import work_queue_of

pytestmark = pytest.mark.redis

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "children"
MAP = FIXTURES / "map.yaml"
ITEMS = 1000
KILLS = 5
WIDTH = 32  # children in flight at once (the plan's concurrency)
RECLAIM_AFTER = 2.0  # seconds: how soon a dead worker's runs move
NAP = "0.05"  # seconds each item's action takes: a kill cuts some short, which run again


@pytest.fixture
async def server_url(redis_url: str) -> AsyncIterator[str]:
    """A store URL on a private Redis server (no cluster), under a prefix of its own."""
    async with isolated_redis_url(redis_url) as url:
        yield url


class Workers:
    """Named ``phasegraph worker`` processes, started and killed as a test goes.

    Each writes its log to ``NAME.log`` in ``folder``; each action call appends a line
    to ``marks``.
    """

    def __init__(self, url: str, folder: Path, marks: Path) -> None:
        self.url = url
        self.folder = folder
        self.env = {**os.environ, "PHASEGRAPH_TEST_MARKS": str(marks), "PHASEGRAPH_TEST_NAP": NAP}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0

    def start(self) -> str:
        """Start one more worker; its name."""
        name = f"w{self.started}"
        self.started += 1
        with (self.folder / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                cli_argv(
                    *("worker", "--store", self.url, "--name", name),
                    *("--concurrency", "16", "--reclaim-after", str(RECLAIM_AFTER)),
                ),
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return name

    def kill(self, name: str) -> None:
        """SIGKILL a worker (it leaves its queue entries and leases as they were)."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def alive(self) -> bool:
        """Whether any worker still runs."""
        return any(proc.poll() is None for proc in self.procs.values())

    def stop(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after 20 s)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def worker_pool(url: str, folder: Path) -> Iterator[Workers]:
    """Workers on ``url``, stopped at the end of the block."""
    pool = Workers(url, folder, folder / "marks.txt")
    try:
        yield pool
    finally:
        pool.stop()


def marked(marks: Path) -> int:
    """How many child actions started so far."""
    return len(marks.read_bytes().splitlines()) if marks.exists() else 0


async def victim(store: Store, pool: Workers, parent: str, kill: int) -> tuple[str, bool]:
    """The worker to kill, and whether it drives the parent now.

    Every other time the one driving the parent, if one does; else each in turn.
    """
    holder = await store.holder(parent)
    driver = owner_label(holder).removeprefix("worker ") if holder else None
    if kill % 2 == 0 and driver in pool.procs:
        return driver, True
    name = sorted(pool.procs)[kill % len(pool.procs)]
    return name, name == driver


async def ended(store: Store, run_id: str, pool: Workers) -> None:
    """Until the run ended (fails early if every worker died)."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if RunStatus((await store.read(run_id)).meta.status).terminal:
            return
        assert pool.alive(), "every worker died (see w*.log)"
        await asyncio.sleep(0.2)
    pytest.fail(f"run {run_id} did not end within 900 s")


def assert_clean_logs(folder: Path) -> None:
    """No worker logged a traceback or an error (a drive that crashed logs both)."""
    for log in sorted(folder.glob("w*.log")):
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert " ERROR " not in text, text[-3000:]


def terminal_steps(history: list[StepRecord]) -> int:
    """How many committed steps of a run left it ended (exactly one, for a run that ended)."""
    return sum(1 for record in history if record.status.terminal)


async def submit(engine: Engine, run_input: dict[str, Any]) -> str:
    """Create the map's run and queue it, as ``phasegraph run --detach`` does."""
    async with engine.start(MAP, run_input) as run:
        parent = run.run_id
    queue = work_queue_of(engine.store)
    try:
        await queue.enqueue(parent)
    finally:
        await queue.aclose()
    return parent


async def test_child_runs_spread_over_workers_on_a_server_and_on_a_cluster(
    store_url: str, tmp_path: Path
) -> None:
    async with open_store(store_url) as store:
        engine = Engine(store)
        with worker_pool(store_url, tmp_path) as pool:
            for _ in range(2):
                pool.start()
            parent = await submit(engine, {"n": 40, "width": 8})
            await ended(store, parent, pool)
        state = await engine.get(parent)
        assert state.status is RunStatus.COMPLETED, state.errors
        assert state.data["outs"] == [{"value": item} for item in range(40)]
        drivers = {
            int(line.split(b" ")[2]) for line in (tmp_path / "marks.txt").read_bytes().splitlines()
        }
        # Children ran in the workers, not in this process (which workers took which
        # is the queue's and the scheduler's business: not asserted).
        workers = {proc.pid for proc in pool.procs.values()}
        assert drivers <= workers, (drivers, workers)
        assert drivers
    assert_clean_logs(tmp_path)


async def test_a_thousand_map_items_over_three_workers_survive_five_kills(
    server_url: str, tmp_path: Path
) -> None:
    with worker_pool(server_url, tmp_path) as pool:
        await thousand_items_five_kills(server_url, pool, tmp_path)


async def thousand_items_five_kills(url: str, worker_pool: Workers, tmp_path: Path) -> None:
    """The map of 1,000 items, a worker killed five times while its children run."""
    marks = tmp_path / "marks.txt"
    began = time.monotonic()
    async with open_store(url) as store:
        engine = Engine(store)
        for _ in range(3):
            worker_pool.start()
        parent = await submit(engine, {"n": ITEMS, "width": WIDTH})
        parents_cut = 0
        # Kill a worker five times while the children run, spread over the map, and start
        # another in its place each time.
        for kill in range(KILLS):
            wanted = (kill + 1) * ITEMS // (KILLS + 2)
            deadline = time.monotonic() + 300
            while marked(marks) < wanted:
                assert time.monotonic() < deadline, f"stuck before kill {kill + 1} (w*.log)"
                await asyncio.sleep(0.05)
            name, drove_parent = await victim(store, worker_pool, parent, kill)
            worker_pool.kill(name)
            parents_cut += drove_parent
            worker_pool.start()
        await ended(store, parent, worker_pool)
        took = time.monotonic() - began

        state = await engine.get(parent)
        assert state.status is RunStatus.COMPLETED, state.errors
        # Every result once, in item order (whatever order the children ended in).
        assert state.data["outs"] == [{"value": item} for item in range(ITEMS)]

        # Each gate was answered once, by its own child run, and each child run ended once.
        history = await engine.history(parent)
        opened = {
            event["id"]: event["payload"]["run"]
            for record in history
            for event in record.events
            if event.get("kind") == f"{CHILD_RUN}_request"
        }
        answers = collections.Counter(
            (event["id"], event["payload"]["run"])
            for record in history
            if record.kind == "reply"
            for event in record.events
            if event.get("kind") == f"{CHILD_RUN}_reply"
        )
        assert len(opened) == ITEMS
        assert answers == collections.Counter(opened.items())  # one answer per gate
        children = sorted(opened.values())
        listed = await store.list_runs(limit=ITEMS + 100)
        assert sorted(m.run_id for m in listed if m.graph == "item") == children
        for child in children:
            child_history = await engine.history(child)
            assert terminal_steps(child_history) == 1, child
            assert child_history[-1].status is RunStatus.COMPLETED, child
    # Every item's action ran; at least once, and again only where a kill cut it short.
    runs = collections.Counter(line.split(b" ")[0] for line in marks.read_bytes().splitlines())
    assert len(runs) == ITEMS
    assert sum(runs.values()) - ITEMS <= KILLS * 16  # a killed worker drove at most 16
    assert_clean_logs(tmp_path)
    print(
        f"{ITEMS} items, {KILLS} kills ({parents_cut} of the worker driving the parent): "
        f"{took:.1f} s, {sum(runs.values()) - ITEMS} actions run again"
    )
