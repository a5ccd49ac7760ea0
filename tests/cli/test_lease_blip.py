"""The lease survives a store blip; a longer outage stops the run resumable (exit 4).

The real CLI runs a graph whose one node runs a long ``shell:`` command (it waits for the
test's go-ahead file). While it runs, the store goes away: a private ``redis-server`` is
stopped and started again (its append-only file keeps every write), or another process
holds the SQLite file's write lock. Shorter than the lease's ttl, the renewals are
retried until the store answers and the run completes; longer, the run stops its command
when its lease would expire, says how to resume (exit 4), and ``resume`` completes it.

A full store is such an outage too: Redis over its ``maxmemory`` with ``noeviction``, or a
SQLite file that may not grow, refuses the step's commit and every renewal; the run stops
resumable, quoting the store, and ``resume`` completes it once the store takes writes.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from builders import cli_argv
from phasegraph.cli._support import EXIT_STOPPED
from redis_kit import server as server  # the fixture
from redis_kit import wait_for

GRAPH = """\
graph: blip
nodes:
  - id: long
    machine: task
    bind:
      run:
        shell: [sh, -c, {script}]
"""
# Notes that it started, waits for the go-ahead file, notes that it ended.
SCRIPT = 'echo start >> "$LOG"; while [ ! -e "$GO" ]; do sleep 0.02; done; echo done >> "$LOG"'


class _Run:
    """``phasegraph run`` of the one-node graph in a subprocess, with a short lease."""

    def __init__(self, workdir: Path, store: str, ttl: float) -> None:
        self.workdir = workdir
        self.store = store
        self.run_id = "blip-" + uuid.uuid4().hex[:8]
        self.graph = workdir / "graph.yaml"
        self.graph.write_text(GRAPH.format(script=json.dumps(SCRIPT)), encoding="utf-8")
        self.log, self.go = workdir / "log", workdir / "go"
        self.env = {
            **os.environ,
            "LOG": str(self.log),
            "GO": str(self.go),
            "PHASEGRAPH_LEASE_TTL": str(ttl),
        }
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        argv = cli_argv("run", str(self.graph), "--store", self.store, "--run-id", self.run_id)
        self.process = subprocess.Popen(
            [*argv, "-q", "--json"],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: self.lines() == ["start"], "the command to start")

    def lines(self) -> list[str]:
        return self.log.read_text(encoding="ascii").split() if self.log.exists() else []

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        assert self.process is not None
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err

    def resume(self) -> subprocess.CompletedProcess[str]:
        argv = cli_argv("resume", self.run_id, "--store", self.store, "-q", "--json")
        return subprocess.run(
            argv,
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def _completed(code: int, out: str, err: str) -> None:
    assert code == 0, err
    assert json.loads(out)["status"] == "completed"


def _stopped_resumable(run: _Run, code: int, err: str, ran: tuple[str, ...] = ("start",)) -> None:
    """The run stopped when its lease would expire, saying how to continue it.

    ``ran`` is what the command wrote: by default it was stopped, and never ended by itself.
    """
    assert code == EXIT_STOPPED, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert f"run {run.run_id!r} stopped at step 1" in lines[0]
    assert "its actions were stopped" in lines[0]
    assert f"'phasegraph resume {run.run_id} --store {run.store}'" in lines[0]
    assert run.lines() == list(ran)


@pytest.mark.redis
def test_redis_restart_shorter_than_the_lease_is_survived(tmp_path, server):
    ttl = 3.0
    run = _Run(tmp_path, server.url, ttl)
    try:
        run.start()
        down = time.monotonic()
        server.stop()
        time.sleep(1.0)  # renewals fail meanwhile (connection refused)
        server.start()
        # Past the lease's ttl since the outage began: a lease nobody renewed has expired.
        time.sleep(max(down + ttl + 0.5 - time.monotonic(), 0))
        run.go.touch()
        _completed(*run.finish())
    finally:
        run.close()
    assert run.lines() == ["start", "done"]  # the command ran once, to its end


@pytest.mark.redis
def test_redis_down_longer_than_the_lease_stops_the_run_resumable(tmp_path, server):
    run = _Run(tmp_path, server.url, ttl=1.5)
    try:
        run.start()
        server.stop()
        code, _, err = run.finish()
        assert "cannot reach Redis" in err
        _stopped_resumable(run, code, err)
        server.start()
        run.go.touch()
        _completed(*_args(run.resume()))
    finally:
        run.close()
    assert run.lines() == ["start", "start", "done"]


def test_sqlite_locked_longer_than_the_lease_stops_the_run_resumable(tmp_path):
    db = tmp_path / "runs.db"
    run = _Run(tmp_path, f"sqlite:///{db}", ttl=1.5)
    try:
        run.start()
        locker = sqlite3.connect(db, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")  # another process's write lock on the file
            code, _, err = run.finish()
        finally:
            locker.close()
        _stopped_resumable(run, code, err)
        run.go.touch()
        _completed(*_args(run.resume()))
    finally:
        run.close()
    assert run.lines() == ["start", "start", "done"]


@pytest.mark.redis
def test_a_full_redis_stops_the_run_resumable_quoting_redis(tmp_path, server):
    """Over its maxmemory (noeviction), Redis refuses the step's commit: an outage, not bad
    input. The command has ended, so its step is committed once Redis takes writes again."""
    client = redis.Redis.from_url(server.url)
    run = _Run(tmp_path, server.url, ttl=1.5)
    try:
        client.config_set("maxmemory-policy", "noeviction")
        run.start()
        client.config_set("maxmemory", 1)  # any write is over it: the server is full
        run.go.touch()  # the command ends, and its step cannot be committed
        code, _, err = run.finish()
        _stopped_resumable(run, code, err, ran=("start", "done"))
        assert "Redis at " in err
        assert 'takes no writes now: OOM "command not allowed when used memory' in err
        client.config_set("maxmemory", 0)
        _completed(*_args(run.resume()))
    finally:
        run.close()
        client.close()
    assert run.lines() == ["start", "done", "start", "done"]  # the step in flight, again


def test_a_sqlite_file_that_may_not_grow_stops_the_run_resumable(tmp_path):
    """A full disk, as the driver sees it: its writes to the store fail. Here the kernel's
    file size limit does it (EFBIG where a full disk says ENOSPC; SQLite reports a disk
    I/O error instead of a full disk, and phasegraph treats both as the store failing)."""
    db = tmp_path / "runs.db"
    run = _Run(tmp_path, f"sqlite:///{db}", ttl=1.5)
    try:
        run.start()
        assert run.process is not None
        written = Path(f"{db}-wal").stat().st_size
        resource.prlimit(run.process.pid, resource.RLIMIT_FSIZE, (written, written))
        run.go.touch()
        code, _, err = run.finish()
        _stopped_resumable(run, code, err, ran=("start", "done"))
        assert f"SQLite store {str(db)!r} failed: disk I/O error" in err
        _completed(*_args(run.resume()))
    finally:
        run.close()
    assert run.lines() == ["start", "done", "start", "done"]


def _args(done: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    return done.returncode, done.stdout, done.stderr
