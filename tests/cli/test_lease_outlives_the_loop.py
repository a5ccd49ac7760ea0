"""A run keeps its lease while its event loop is busy, and a lapsed lease is not a lost one.

The real CLI, in a subprocess, on SQLite and on a real Redis:

* an ``async`` action that blocks the event loop for several lease lengths (it waits for
  the test's go-ahead file with ``time.sleep``): the lease keeps being renewed in the
  store the whole time (the keeper renews from a thread of its own), and the run
  completes in one ``run`` with its action run once;
* a step whose value takes the loop a long time to encode and send (50 MB on Redis,
  under a 1 s lease): the run completes instead of stopping at that step.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from builders import cli_argv, sqlite_db

GRAPH = """\
graph: busy_loop
nodes:
  - id: busy
    machine: task
    bind:
      run: {python: "busy_acts:block"}
  - id: big
    machine: task
    needs: [busy]
    bind:
      run: {python: "busy_acts:big"}
  - id: measure
    machine: task
    needs: [big]
    bind:
      run: {python: "busy_acts:measure"}
output: [size]
"""

ACTS = """\
import os
import time


async def block(ctx):
    # Blocks the event loop (no await) until the test's go-ahead file exists.
    with open(os.environ["MARKS"], "a") as marks:
        marks.write("block\\n")
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.02)
    return {"trigger": "ok"}


async def big(ctx):
    return {"trigger": "ok", "data": {"blob": "x" * int(os.environ["BIG"])}}


async def measure(ctx):
    return {"trigger": "ok", "data": {"size": len(ctx.data["blob"])}}
"""

_WAIT = 60.0


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _WAIT
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield request.getfixturevalue("redis_url")


def _lease_expiry(store_url: str, run_id: str) -> float | None:
    """When the run's lease expires, in seconds since the epoch, as the store has it."""
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///")
        if not os.path.exists(path):
            return None
        with sqlite_db(path, timeout=30) as conn:
            row = conn.execute(
                "SELECT lease_expires FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else float(row[0])
    client = redis.Redis.from_url(store_url)
    try:
        expiry_ms = client.execute_command("PEXPIRETIME", f"pg:{{{run_id}}}:lease")
    finally:
        client.close()
    return None if expiry_ms < 0 else expiry_ms / 1000


def _start(
    store_url: str, tmp_path: Path, *, ttl: str, big: int
) -> tuple[subprocess.Popen[str], str]:
    (tmp_path / "busy.yaml").write_text(GRAPH, encoding="utf-8")
    (tmp_path / "busy_acts.py").write_text(ACTS, encoding="utf-8")
    run_id = "busy-" + uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "MARKS": str(tmp_path / "marks"),
        "GO": str(tmp_path / "go"),
        "BIG": str(big),
        "PHASEGRAPH_LEASE_TTL": ttl,
    }
    argv = cli_argv("run", str(tmp_path / "busy.yaml"), "--store", store_url, "--run-id", run_id)
    process = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return process, run_id


def test_a_blocked_event_loop_keeps_its_lease_and_the_run_completes_once(
    store_url: str, tmp_path: Path
) -> None:
    process, run_id = _start(store_url, tmp_path, ttl="1", big=10)
    try:
        marks = tmp_path / "marks"
        _wait_for(marks.exists, "the blocking action to start")
        first = _lease_expiry(store_url, run_id)
        assert first is not None
        # The loop is blocked from here on. Renewals made through it could not happen:
        # the expiry in the store moves on only if something else renews the lease.
        _wait_for(
            lambda: (_lease_expiry(store_url, run_id) or 0) > first + 2.0,
            "the lease to be renewed past two more lease lengths while the loop is blocked",
        )
        (tmp_path / "go").touch()
        out, err = process.communicate(timeout=_WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "completed" in out
    assert marks.read_text().splitlines() == ["block"]  # the action ran once


def test_a_step_that_busies_the_loop_past_its_lease_commits(store_url: str, tmp_path: Path) -> None:
    """A 50 MB value built, encoded, sent and read back under a 1 s lease: it completes."""
    (tmp_path / "go").touch()
    size = 50 * 1024 * 1024
    process, _ = _start(store_url, tmp_path, ttl="1", big=size)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert f"\n  size: {size}\n" in out, out
