"""``phasegraph serve`` in front of workers (``--queue``) and with one inside (``--with-worker``).

Real processes on a private redis-server, HTTP over a socket: the server commits a new
run's first step and a reply, the worker drives everything else, and each run ends as
the same run driven by a plain server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from test_server import FIXTURES, GATED, LOOPING, SIDE_GATE
from test_server_crash import _json, _Server, _until, store_url

from builders import cli_argv
from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

pytestmark = pytest.mark.redis
__all__ = ["store_url"]  # the fixture, shared with the crash test

LOOPS = 6


async def _reference() -> dict[str, object]:
    async with MemoryStore() as store:
        state = await Engine(store).run(FIXTURES / "looping.yaml", {"loops": LOOPS})
    return {"seq": state.seq, "data": dict(state.data)}


async def _drive_both(url: str) -> None:
    """A looping run to its end, a gated run to its gate, answered, to its end."""
    expected = await _reference()
    async with aiohttp.ClientSession(url) as session:
        body = {"graph_yaml": LOOPING, "input": {"loops": LOOPS}}
        looping = (await _json(session, "POST", "/runs", json=body))["run_id"]
        body = {"graph_yaml": GATED, "input": {"topic": "queue"}}
        gated = (await _json(session, "POST", "/runs", json=body))["run_id"]
        done = await _until(session, looping, lambda v: v["status"] == "completed")
        assert done["seq"] == expected["seq"]
        snapshot = await _json(session, "GET", f"/runs/{looping}/snapshot")
        assert snapshot["data"] == expected["data"]
        await _until(session, gated, lambda v: v["status"] == "waiting")
        reply = {"interrupt_id": f"{gated}:spec:spec_review", "trigger": "confirm"}
        await _json(session, "POST", f"/runs/{gated}/reply", json=reply)
        done = await _until(session, gated, lambda v: v["status"] == "completed")
        assert done["nodes"]["build"]["status"] == "completed"


@contextlib.asynccontextmanager
async def _worker(store_url: str, workdir: Path) -> AsyncIterator[Path]:
    """One ``phasegraph worker`` process; yields its log's path (read after it stopped)."""
    path = [str(FIXTURES), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    # The only worker, and it never dies: it has nothing to take over from another, and
    # must not take its own runs back however late a loaded machine runs its heartbeat.
    argv = cli_argv(
        *("worker", "--store", store_url, "--name", "w", "--lease-ttl", "1"),
        *("--reclaim-after", "60"),
    )
    log_path = workdir / "worker.log"
    with log_path.open("wb") as log:
        worker = await asyncio.create_subprocess_exec(*argv, env=env, cwd=workdir, stderr=log)
    try:
        yield log_path
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await worker.wait()


async def test_a_server_in_front_of_a_worker_drives_nothing_itself(
    store_url: str, tmp_path: Path
) -> None:
    server = _Server(store_url, tmp_path, "--queue")
    async with _worker(store_url, tmp_path) as log:
        try:
            await server.start()
            await _drive_both(server.url)
            assert await server.stop(signal.SIGTERM) == 0, server.log()
            assert "runs go to the workers' queue" in server.log()
        finally:
            await server.stop(signal.SIGKILL)
    # The worker drove both runs: the first drive of each, then the gated one's reply.
    stopped = log.read_text().splitlines()[-1]
    assert stopped.startswith("worker w stopped: 3 drives, "), stopped


async def test_a_reply_and_a_cancel_reach_runs_a_worker_is_driving(
    store_url: str, tmp_path: Path
) -> None:
    server = _Server(store_url, tmp_path, "--queue")
    async with _worker(store_url, tmp_path):
        try:
            await server.start()
            async with aiohttp.ClientSession(server.url) as session:
                # The answered run's side loop counts until the test releases it.
                release = tmp_path / "release"
                run_input = {"loops": 100000, "delay": 0.05, "until": str(release)}
                body = {"graph_yaml": SIDE_GATE, "input": run_input}
                answered_id = (await _json(session, "POST", "/runs", json=body))["run_id"]
                body = {"graph_yaml": SIDE_GATE, "input": {"loops": 100000, "delay": 0.05}}
                cancelled_id = (await _json(session, "POST", "/runs", json=body))["run_id"]
                for run_id in (answered_id, cancelled_id):
                    gated = await _until(session, run_id, lambda v: bool(v["interrupts"]))
                    assert gated["status"] == "running"  # the side loop still works
                reply = {"interrupt_id": f"{answered_id}:gate:run", "trigger": "ok"}
                answered = await _json(session, "POST", f"/runs/{answered_id}/reply", json=reply)
                # The run right after the reply's step, which the worker committed.
                assert answered["nodes"]["gate"]["status"] == "completed"
                assert answered["status"] == "running"
                assert answered["nodes"]["side"]["status"] == "running"
                path = f"/runs/{cancelled_id}/cancel"
                cancelled = await _json(session, "POST", path, json={"reason": "enough"})
                assert cancelled["status"] == "cancelled"
                # The worker committed both, naming the server's principal (no sign-in: local).
                local = {"name": "local", "groups": []}
                for run_id, kind in ((answered_id, "reply"), (cancelled_id, "cancel")):
                    page = await _json(session, "GET", f"/runs/{run_id}/history?limit=1000")
                    assert [r["actor"] for r in page["records"] if r["kind"] == kind] == [local]
                release.touch()
                done = await _until(session, answered_id, lambda v: v["status"] == "completed")
                # The worker drove the side loop on past the reply, each step counted once.
                steps = done["nodes"]["side"]["steps"]
                assert steps > answered["nodes"]["side"]["steps"]
                snapshot = await _json(session, "GET", f"/runs/{answered_id}/snapshot")
                assert snapshot["data"]["side"] == steps - 1
                again = await session.post(f"/runs/{answered_id}/reply", json=reply)
                assert again.status == 409
        finally:
            await server.stop(signal.SIGKILL)


async def test_serve_with_worker_is_one_command_for_one_machine(
    store_url: str, tmp_path: Path
) -> None:
    server = _Server(store_url, tmp_path, "--with-worker")
    try:
        await server.start()
        await _drive_both(server.url)
        assert await server.stop(signal.SIGTERM) == 0, server.log()
        assert " in this process drives 64 at once" in server.log()
    finally:
        await server.stop(signal.SIGKILL)


@pytest.mark.parametrize("option", ["--queue", "--with-worker"])
def test_queue_on_a_store_without_one_is_one_clear_error(option: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    argv = cli_argv("serve", "--store", url, "--port", "0", option)
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode == 2
    assert refused.stdout == ""  # never started serving
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "has no work queue (use --store redis://HOST:PORT/DB" in refused.stderr
