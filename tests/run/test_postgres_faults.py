"""Faults under a run on Postgres: the server killed mid-commit, a connection cut, a full
disk, a statement timeout. Each ends with no step lost or doubled: a run either rides the
fault out, or stops with exit 4 and one line naming the resume command, which then ends
it exactly as an uninterrupted run.

Real processes (``phasegraph run`` and ``resume``), the crash graph whose every action
appends ``node:steps`` to a log; the server is a private one where it is killed or its
disk filled, the suite's database otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from builders import TESTS, cli_argv
from phasegraph import Engine, open_store
from phasegraph.errors import StoreUnavailableError
from phasegraph.model import NodeStatus, RunState, RunStatus
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import make_commit
from postgres_kit import RestartablePostgres, isolated_postgres_url, libpq_url, sql

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"
LOOPS, DELAY = 4, 0.05  # 17 steps
__all__ = ["GRAPH", "PgRun", "in_flight", "reference", "settled", "wait_for"]


def _marks(log: Path) -> Counter[str]:
    return Counter(log.read_text(encoding="utf-8").split()) if log.exists() else Counter()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunState, Counter[str]]:
    """An uninterrupted run of the crash graph (in process, memory store) and its marks."""
    log = tmp_path_factory.mktemp("reference") / "log.txt"

    async def scenario() -> RunState:
        async with MemoryStore() as store:
            return await Engine(store).run(GRAPH, {"log": str(log), "loops": LOOPS})

    state = asyncio.run(scenario())
    assert state.status is RunStatus.COMPLETED
    return state, _marks(log)


@pytest.fixture(autouse=True)
def _crash_actions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process reference imports the graph's actions from beside it."""
    monkeypatch.syspath_prepend(str(GRAPH.parent))


class PgRun:
    """One run of the crash graph driven by ``phasegraph`` processes on a Postgres store."""

    def __init__(self, url: str, workdir: Path, *, lease_ttl: float = 30.0) -> None:
        self.url = url
        self.workdir = workdir
        self.log = workdir / f"log-{uuid.uuid4().hex[:6]}.txt"
        self.run_id = "pg-" + uuid.uuid4().hex[:10]
        self.env = {**os.environ, "PHASEGRAPH_LEASE_TTL": str(lease_ttl)}
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        inputs = {"log": str(self.log), "loops": str(LOOPS), "delay": str(DELAY)}
        argv = cli_argv("run", str(GRAPH), "--store", self.url, "--run-id", self.run_id, "-q")
        for key, value in inputs.items():
            argv += ["--input", f"{key}={value}"]
        self.process = subprocess.Popen(
            argv,
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def head(self) -> int:
        """The run's committed head (-1 before its first step, or if the server is away)."""
        try:
            rows = sql(self.url, "SELECT seq FROM runs WHERE run_id = %s", self.run_id)
        except psycopg.Error:  # the server is away, or the tables are not made yet
            return -1
        return int(rows[0][0]) if rows else -1  # type: ignore[call-overload]

    def ended(self, timeout: float = 120) -> tuple[int, str]:
        """The run process's exit status and stderr, once it ends."""
        assert self.process is not None
        _, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, err

    async def state(self) -> RunState:
        async with open_store(self.url) as store:
            return await Engine(store).get(self.run_id)

    def resume(self) -> subprocess.CompletedProcess[str]:
        argv = cli_argv("resume", self.run_id, "--store", self.url, "-q", "--json")
        return subprocess.run(
            argv,
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def marks(self) -> Counter[str]:
        return _marks(self.log)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def in_flight(state: RunState) -> set[str]:
    """The marks of the actions that may have been running, uncommitted, in ``state``."""
    return {
        f"{node_id}:{node.steps}"
        for node_id, node in state.nodes.items()
        if node.status is NodeStatus.RUNNING
    }


def settled(
    final: RunState,
    marks: Counter[str],
    reference: tuple[RunState, Counter[str]],
    stops: list[RunState],
) -> int:
    """Check ``final`` ended as the uninterrupted run; return how many actions ran again.

    Lost: the final state differs from the reference's. Redone: an action ran again
    although its step was committed at every stop (only the step in flight at a stop may
    run again, once per such stop).
    """
    expected, expected_marks = reference
    assert final.status is RunStatus.COMPLETED
    assert (final.data, final.seq) == (expected.data, expected.seq)
    for node_id, node in expected.nodes.items():
        got = final.nodes[node_id]
        assert (got.status, got.path, got.counters, got.steps, got.outcome) == (
            node.status,
            node.path,
            node.counters,
            node.steps,
            node.outcome,
        ), node_id
    assert set(marks) == set(expected_marks)
    again = 0
    for mark, count in marks.items():
        allowed = 1 + sum(mark in in_flight(stop) for stop in stops)
        assert count <= allowed, (mark, count, allowed)
        again += count - 1
    return again


def _stopped_with_resume(code: int, err: str, run: PgRun, why: str) -> None:
    """Exit 4 and one line: why it stopped and the command that continues it."""
    assert code == 4, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert why in lines[0], lines[0]
    assert f"phasegraph resume {run.run_id}" in lines[0], lines[0]


def _resumed(run: PgRun) -> RunState:
    resumed = run.resume()
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    return asyncio.run(run.state())


# ------------------------------------------------------------------------ server killed


def test_postgres_killed_mid_commit_stops_the_run_and_resume_ends_it_exactly(
    pg_server: RestartablePostgres, reference: tuple[RunState, Counter[str]], tmp_path: Path
) -> None:
    run = PgRun(pg_server.url, tmp_path, lease_ttl=1.0)
    try:
        run.start()
        wait_for(lambda: run.head() >= 6, "six committed steps")
        pg_server.kill()  # every process of the server at once, commits in flight
        code, err = run.ended()
        _stopped_with_resume(code, err, run, f"cannot reach Postgres at {pg_server.url}")
        pg_server.start()  # recovery replays the write-ahead log: every acknowledged commit
        at_stop = asyncio.run(run.state())
        assert 6 <= at_stop.seq < reference[0].seq
        final = _resumed(run)
        assert settled(final, run.marks(), reference, [at_stop]) <= len(in_flight(at_stop))
    finally:
        run.close()


# ------------------------------------------------------------------ connection cut


def test_connections_cut_mid_run_are_ridden_out_with_no_step_lost_or_doubled(
    postgres_url: str, reference: tuple[RunState, Counter[str]], tmp_path: Path
) -> None:
    name = "pgcut" + uuid.uuid4().hex[:8]
    with isolated_postgres_url(postgres_url, application_name=name) as url:
        run = PgRun(url, tmp_path)
        cuts = 0
        try:
            run.start()
            for at in (3, 7, 11):
                wait_for(lambda at=at: run.head() >= at, f"{at} committed steps")
                # Every connection of the run's process, pooled and the lease keeper's.
                cuts += _terminate(url, name)
            code, err = run.ended()
            assert code == 0, err
            assert err == ""
            final = asyncio.run(run.state())
        finally:
            run.close()
    assert cuts >= 3
    # The process lived: no action ran again, every step was committed once.
    assert settled(final, run.marks(), reference, []) == 0


def _terminate(url: str, application: str) -> int:
    rows = sql(
        url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        application,
    )
    return int(rows[0][0])  # type: ignore[call-overload]


# ------------------------------------------------------------------ statement timeout


@contextlib.contextmanager
def _row_locked(url: str, run_id: str) -> Iterator[threading.Event]:
    """Hold the run's row locked (another session's open transaction) until the event is set."""
    release, locked = threading.Event(), threading.Event()

    def hold() -> None:
        schema = dict(parse_qsl(urlsplit(url).query))["schema"]
        statement = f'SELECT 1 FROM "{schema}".runs WHERE run_id = %s FOR UPDATE'
        with psycopg.connect(libpq_url(url), connect_timeout=5) as conn:
            conn.execute(statement.encode(), (run_id,))
            locked.set()
            release.wait(60)
            conn.rollback()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    locked.wait(10)
    try:
        yield release
    finally:
        release.set()
        thread.join(30)


def test_statement_timeouts_stop_the_run_with_the_resume_command(
    postgres_url: str, reference: tuple[RunState, Counter[str]], tmp_path: Path
) -> None:
    timeout = {"options": "-c statement_timeout=200"}
    with isolated_postgres_url(postgres_url, **timeout) as url:
        run = PgRun(url, tmp_path, lease_ttl=1.0)
        try:
            run.start()
            wait_for(lambda: run.head() >= 5, "five committed steps")
            # Commits and renewals wait for the lock, and each is cancelled after 200 ms.
            with _row_locked(url, run.run_id):
                code, err = run.ended()
            _stopped_with_resume(code, err, run, "stopped at step")
            assert "cancel" in err or "reach Postgres" in err, err
            at_stop = asyncio.run(run.state())
            final = _resumed(run)
        finally:
            run.close()
    assert settled(final, run.marks(), reference, [at_stop]) <= len(in_flight(at_stop))


async def test_a_commit_cancelled_by_the_statement_timeout_writes_nothing(
    postgres_url: str,
) -> None:
    with isolated_postgres_url(postgres_url, options="-c statement_timeout=100") as url:
        async with open_store(url) as store:
            lease = await store.acquire("r", "w1", 30)
            await store.commit(lease, make_commit("r", 0))
            with _row_locked(url, "r"):
                with pytest.raises(StoreUnavailableError, match="cancelled a statement"):
                    await store.commit(lease, make_commit("r", 1))
                assert (await store.read("r")).meta.seq == 0
            await store.commit(lease, make_commit("r", 1))  # the retry, once the lock is gone
            assert [seq async for seq, _ in store.history("r")] == [0, 1]


# ------------------------------------------------------------------------- full disk


@pytest.fixture
def small_disk(pg_server: RestartablePostgres) -> Iterator[Path]:
    """A 2 MiB tmpfs, owned by the server's user (mounting one needs root)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: the full-disk test mounts a small tmpfs")
        pytest.skip("mounting a small tmpfs for the full-disk test needs root")
    mount = pg_server.dir / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        os.chown(mount, *_owner(pg_server.dir))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _owner(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_uid, status.st_gid


def test_a_full_disk_stops_the_run_and_resume_ends_it_once_there_is_room(
    pg_server: RestartablePostgres,
    small_disk: Path,
    reference: tuple[RunState, Counter[str]],
    tmp_path: Path,
) -> None:
    url = pg_server.url + "?schema=full"
    asyncio.run(_migrated(url))
    # The journal's tables on the small disk; the rest (and the write-ahead log) elsewhere.
    sql(url, f"CREATE TABLESPACE small LOCATION '{small_disk}'")
    # Pages that take few rows (fillfactor 10), so a step soon needs a new one.
    for table in ("records", "snapshots"):
        sql(url, f"ALTER TABLE {table} SET TABLESPACE small")
        sql(url, f"ALTER TABLE {table} SET (fillfactor = 10)")
        sql(url, f"ALTER INDEX {table}_pkey SET TABLESPACE small")
        sql(url, f"ALTER INDEX {table}_pkey SET (fillfactor = 10)")
    ballast = small_disk / "ballast"
    run = PgRun(url, tmp_path, lease_ttl=1.0)
    try:
        run.start()
        wait_for(lambda: run.head() >= 4, "four committed steps")
        _fill(ballast)
        code, err = run.ended()
        _stopped_with_resume(code, err, run, "out of resources")
        at_stop = asyncio.run(run.state())
        ballast.unlink()  # room again
        final = _resumed(run)
    finally:
        run.close()
    assert settled(final, run.marks(), reference, [at_stop]) <= len(in_flight(at_stop))


async def _migrated(url: str) -> None:
    async with open_store(url) as store:
        await store.migrate()  # type: ignore[attr-defined]


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until its file system is full."""
    with path.open("wb") as ballast, contextlib.suppress(OSError):
        while True:
            ballast.write(b"\0" * 65536)
            ballast.flush()
