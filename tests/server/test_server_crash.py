"""``phasegraph serve`` killed with SIGKILL while runs are active, on a real Redis.

A restarted server must resume every run that was ``running`` from its last committed
step (once the dead server's lease expires) and end it exactly like an uninterrupted
run, and must leave a run waiting on a human gate waiting, still answerable.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_server import FIXTURES, GATED, LOOPING

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import isolated_redis_url

pytestmark = pytest.mark.redis

LOOPS = 12


class _Server:
    """One ``phasegraph serve`` process on a free port (``extra``: options in place of -q)."""

    def __init__(self, store_url: str, workdir: Path, *extra: str) -> None:
        self.store_url = store_url
        self.workdir = workdir
        self.extra = extra
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> None:
        argv = cli_argv(
            "serve",
            "--store",
            self.store_url,
            "--port",
            "0",
            "--allow-python",
            "gate_actions",
            "phasegraph.concerns.spec",
            "--lease-ttl",
            "1",
            "--upload-dir",
            str(self.workdir / "uploads"),
            *(self.extra or ("-q",)),
        )
        path = [str(FIXTURES), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        with (self.workdir / "server.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv, cwd=self.workdir, env=env, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        assert self.process.stdout is not None
        async with asyncio.timeout(20):
            line = (await self.process.stdout.readline()).decode()
        assert line.startswith("phasegraph serving http://"), self.log()
        self.url = line.split()[-1]

    def log(self) -> str:
        return (self.workdir / "server.log").read_text(encoding="utf-8", errors="replace")

    async def stop(self, sig: int) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)
        return await self.process.wait()


@pytest.fixture
async def store_url(redis_url: str) -> AsyncIterator[str]:
    async with isolated_redis_url(redis_url) as url:
        yield url


async def _json(session: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> Any:
    async with session.request(method, path, **kw) as response:
        assert response.status < 300, await response.text()
        return await response.json()


async def _until(
    session: aiohttp.ClientSession, run_id: str, done: Any, within: float = 20
) -> dict[str, Any]:
    async with asyncio.timeout(within):
        while True:
            current: dict[str, Any] = await _json(session, "GET", f"/runs/{run_id}")
            if done(current):
                return current
            await asyncio.sleep(0.05)


async def test_sigkilled_server_is_restarted_and_finishes_its_runs(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with MemoryStore() as reference_store:
        reference = await Engine(reference_store).run(FIXTURES / "looping.yaml", {"loops": LOOPS})
    loop_input = {"loops": LOOPS, "delay": 0.1}
    first, second = _Server(store_url, tmp_path), _Server(store_url, tmp_path)
    try:
        await first.start()
        async with aiohttp.ClientSession(first.url) as session:
            body = {"graph_yaml": LOOPING, "input": loop_input}
            loops = [(await _json(session, "POST", "/runs", json=body))["run_id"] for _ in range(4)]
            body = {"graph_yaml": GATED, "input": {"topic": "crash"}}
            gated = (await _json(session, "POST", "/runs", json=body))["run_id"]
            for run_id in loops:
                await _until(session, run_id, lambda v: v["seq"] >= 4)
            await _until(session, gated, lambda v: v["status"] == "waiting")
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL

        async with open_store(store_url) as store:
            at_kill = {run_id: await Engine(store).get(run_id) for run_id in loops}
        assert {state.status for state in at_kill.values()} == {"running"}

        await second.start()
        async with aiohttp.ClientSession(second.url) as session:
            for run_id in loops:
                done = await _until(session, run_id, lambda v: v["status"] != "running")
                assert done["status"] == "completed", second.log()
                assert done["seq"] == reference.seq
                assert done["seq"] > at_kill[run_id].seq
                snapshot = await _json(session, "GET", f"/runs/{run_id}/snapshot")
                assert snapshot["data"] == dict(reference.data)
                history = await _json(session, "GET", f"/runs/{run_id}/history?limit=1000")
                assert [r["seq"] for r in history["records"]] == list(range(reference.seq + 1))
            waiting = await _json(session, "GET", f"/runs/{gated}")
            assert waiting["status"] == "waiting"
            reply = {"interrupt_id": f"{gated}:spec:spec_review", "trigger": "confirm"}
            await _json(session, "POST", f"/runs/{gated}/reply", json=reply)
            done = await _until(session, gated, lambda v: v["status"] == "completed")
            assert done["nodes"]["build"]["status"] == "completed"
        assert await second.stop(signal.SIGTERM) == 0, second.log()
    finally:
        for server in (first, second):
            if server.process is not None and server.process.returncode is None:
                await server.stop(signal.SIGKILL)


async def test_a_restarted_server_finishes_a_hundred_runs_in_flight(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILLed with 100 runs in flight under a 1 s lease, the next server completes
    every one, though their steps keep its event loop busy for longer than a lease (each
    blocks it 10 ms, and 200 are in flight): leases are renewed off the loop, and a lease
    that lapses while nobody takes the run is not a lost one."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    loops = 3
    async with MemoryStore() as reference_store:
        reference = await Engine(reference_store).run(FIXTURES / "looping.yaml", {"loops": loops})
    body = {"graph_yaml": LOOPING, "input": {"loops": loops, "delay": 0.01, "hold": 0.01}}
    first, second = _Server(store_url, tmp_path), _Server(store_url, tmp_path)
    try:
        await first.start()
        async with aiohttp.ClientSession(first.url) as session:
            runs = [
                (await _json(session, "POST", "/runs", json=body))["run_id"] for _ in range(100)
            ]
            await _until(session, runs[-1], lambda v: v["seq"] >= 2, 120)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        async with open_store(store_url) as store:
            running = [r for r in runs if (await Engine(store).get(r)).status == "running"]
        assert running  # killed with runs in flight

        await second.start()
        async with aiohttp.ClientSession(second.url) as session:
            for run_id in runs:
                done = await _until(session, run_id, lambda v: v["status"] != "running", 120)
                assert done["status"] == "completed", second.log()
                assert done["seq"] == reference.seq
        assert await second.stop(signal.SIGTERM) == 0, second.log()
    finally:
        for server in (first, second):
            if server.process is not None and server.process.returncode is None:
                await server.stop(signal.SIGKILL)
