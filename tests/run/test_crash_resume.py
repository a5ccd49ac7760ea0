"""Crash-resume with real processes on a real Redis, and one writer per run.

``phasegraph run`` is SIGKILLed at different points; ``phasegraph resume`` must then end
the run with exactly the outcome and data of an uninterrupted run, and no committed
step's action may have run twice (only an action that was in flight may run again).
Every action of the test graph appends ``node:steps`` to a log file, which is how the
executions are counted.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import redis

from builders import TESTS, cli_argv, engine, graph, prepared, returning
from phasegraph import Engine, open_store
from phasegraph.errors import LeaseHeldError
from phasegraph.model import NodeStatus, RunState, RunStatus
from phasegraph.run import RunOptions
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import isolated_redis_store

pytestmark = pytest.mark.redis

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"
LOOPS, DELAY = 4, 0.05  # 17 steps, about 0.6 s uninterrupted


def _inputs(log: Path, **extra: str) -> list[str]:
    values = {"log": str(log), "loops": str(LOOPS), "delay": str(DELAY), **extra}
    return [arg for key, value in values.items() for arg in ("--input", f"{key}={value}")]


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.003)


def _marks(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunState, Counter[str]]:
    """An uninterrupted run of the same graph and input (in process, memory store)."""
    log = tmp_path_factory.mktemp("reference") / "log.txt"

    async def scenario() -> RunState:
        async with MemoryStore() as store:
            return await Engine(store).run(GRAPH, {"log": str(log), "loops": LOOPS})

    state = asyncio.run(scenario())
    assert state.status is RunStatus.COMPLETED
    marks = _marks(log)
    assert set(marks.values()) == {1}
    return state, marks


class _Crash:
    """One run of the graph in a subprocess, on a Redis prefix of its own."""

    def __init__(self, redis_url: str, workdir: Path) -> None:
        self.prefix = "pgcrash" + uuid.uuid4().hex[:10]
        parts = urlsplit(redis_url)
        query = urlencode([*parse_qsl(parts.query), ("prefix", self.prefix)])
        self.url = urlunsplit(parts._replace(query=query))
        self.client = redis.Redis.from_url(redis_url)
        self.workdir = workdir
        self.log = workdir / "log.txt"
        self.run_id = "crash-" + uuid.uuid4().hex[:8]
        # The documented Redis layout: every key of a run is P:{run_id}:<name>.
        self.meta_key = f"{self.prefix}:{{{self.run_id}}}:meta"
        self.lease_key = f"{self.prefix}:{{{self.run_id}}}:lease"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, **extra: str) -> None:
        argv = cli_argv("run", str(GRAPH), "--store", self.url, "--run-id", self.run_id, "-q")
        self.process = subprocess.Popen(
            [*argv, *_inputs(self.log, **extra)],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def head(self) -> int:
        seq = self.client.hget(self.meta_key, "seq")
        return -1 if seq is None else int(seq)

    def kill(self) -> RunState:
        """SIGKILL the run; return the state it had committed."""
        assert self.process is not None
        assert self.process.poll() is None, "the run finished before it could be killed"
        self.process.kill()
        self.process.wait()
        return asyncio.run(self.state())

    async def state(self) -> RunState:
        async with open_store(self.url) as store:
            return await Engine(store).get(self.run_id)

    def resume(self) -> subprocess.CompletedProcess[str]:
        argv = cli_argv("resume", self.run_id, "--store", self.url, "-q", "--json")
        return subprocess.run(
            argv, cwd=self.workdir, capture_output=True, text=True, timeout=60, check=False
        )

    def expire_lease(self) -> None:
        """Let the killed writer's lease run out now instead of in 30 s (its ttl)."""
        self.client.pexpire(self.lease_key, 1)
        _wait_for(lambda: not self.client.exists(self.lease_key), "the lease to expire")

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=1000))
        if keys:
            self.client.delete(*keys)
        self.client.close()


@pytest.fixture
def crash(redis_url: str, tmp_path: Path) -> Iterator[_Crash]:
    one = _Crash(redis_url, tmp_path)
    yield one
    one.close()


def _check_resumed(
    crash: _Crash, at_kill: RunState, reference: tuple[RunState, Counter[str]]
) -> set[str]:
    """The resumed run equals the reference; return the marks whose action ran twice."""
    resumed = crash.resume()
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    final = asyncio.run(crash.state())
    expected, expected_marks = reference
    assert final.status is RunStatus.COMPLETED
    assert final.data == expected.data
    assert final.seq == expected.seq
    for node_id, node in expected.nodes.items():
        got = final.nodes[node_id]
        assert (got.status, got.path, got.counters, got.steps, got.outcome) == (
            node.status,
            node.path,
            node.counters,
            node.steps,
            node.outcome,
        ), node_id
    marks = _marks(crash.log)
    assert set(marks) == set(expected_marks)
    again = {mark for mark, count in marks.items() if count > 1}
    assert max(marks.values()) <= 2
    for mark in again:
        # Only an action whose step was not committed when the process died runs again.
        node_id, steps = mark.split(":")
        assert at_kill.nodes[node_id].status is NodeStatus.RUNNING, mark
        assert at_kill.nodes[node_id].steps == int(steps), mark
    return again


@pytest.mark.parametrize("kill_after", [3, 9])
def test_sigkill_after_committed_steps_then_resume(crash, reference, kill_after):
    crash.start()
    _wait_for(lambda: crash.head() >= kill_after, f"{kill_after} committed steps")
    at_kill = crash.kill()
    assert kill_after <= at_kill.seq < reference[0].seq
    crash.expire_lease()
    again = _check_resumed(crash, at_kill, reference)
    running = {n for n, s in at_kill.nodes.items() if s.status is NodeStatus.RUNNING}
    assert len(again) <= len(running)


def test_sigkill_with_action_in_flight_then_resume_at_once(crash, reference):
    holdfile = crash.workdir / "hold"
    holdfile.touch()
    crash.start(hold="b:1", holdfile=str(holdfile))
    _wait_for(lambda: _marks(crash.log)["b:1"] == 1, "b's second action to start")
    # Let c finish (a: start + LOOPS + 1 steps; b: start + 1; c: start + LOOPS + 1), so
    # that b's is the only action in flight when the process dies.
    _wait_for(lambda: crash.head() >= 2 * LOOPS + 6, "c to complete")
    at_kill = crash.kill()
    assert at_kill.nodes["c"].status is NodeStatus.COMPLETED
    assert at_kill.nodes["b"].steps == 1  # b:1 was in flight: its step is not committed
    # The dead process's lease has most of its 30 s left, but its holder is provably
    # dead (this host, this boot, its pid gone): resume takes the run over at once.
    assert crash.client.pttl(crash.lease_key) > 20_000
    holdfile.unlink()
    assert _check_resumed(crash, at_kill, reference) == {"b:1"}


def test_a_live_writer_keeps_its_lease(crash):
    holdfile = crash.workdir / "hold"
    holdfile.touch()
    crash.start(hold="b:1", holdfile=str(holdfile))
    _wait_for(lambda: _marks(crash.log)["b:1"] == 1, "b's second action to start")
    assert crash.process is not None
    crash.process.send_signal(signal.SIGSTOP)  # alive, but not renewing its lease
    try:
        refused = crash.resume()
    finally:
        crash.process.send_signal(signal.SIGCONT)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert crash.run_id in lines[0]
    assert "being written by" in lines[0]
    assert f":{crash.process.pid}'" in lines[0]  # the owner is host:pid of the writer
    holdfile.unlink()
    assert crash.process.wait(timeout=60) == 0  # the writer goes on and finishes the run
    assert asyncio.run(crash.state()).status is RunStatus.COMPLETED
    assert max(_marks(crash.log).values()) == 1  # no action ran twice


async def test_two_concurrent_resumers_exactly_one_wins(redis_url):
    plan = prepared(graph([("a", [])], machine="loop"), {("a", "work"): returning("again")})
    async with isolated_redis_store(redis_url) as store:
        async with engine(store).start(plan) as run:
            await run.next()
        run_id = run.run_id
        proceed = asyncio.Event()

        async def resumer(owner: str) -> str:
            contender = Engine(store, options=RunOptions(owner=owner))
            async with contender.open(run_id, graph=plan) as opened:
                await proceed.wait()
                await opened.next()
            return owner

        tasks = [asyncio.create_task(resumer(name)) for name in ("alpha", "beta")]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        (loser,) = done
        error = loser.exception()
        assert isinstance(error, LeaseHeldError)
        proceed.set()
        (winner,) = pending
        owner = await winner
        assert owner in ("alpha", "beta")
        assert error.run_id == run_id
        assert run_id in str(error)
        assert f"being written by {owner!r}" in str(error)
        assert (await Engine(store).get(run_id)).seq == 2  # only the winner committed
        async with Engine(store).open(run_id, graph=plan):
            pass  # the winner released the run on exit
