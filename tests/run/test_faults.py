"""Faults: an unreachable store, a connection lost mid-run, unreadable stored payloads."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import msgpack
import pytest
import redis

from builders import TESTS, cli_argv, engine, free_port, graph, prepared, sqlite_db
from phasegraph import Engine, open_store
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.cli import main
from phasegraph.errors import LeaseHeldError, LeaseLostError
from phasegraph.model import RunState, RunStatus
from phasegraph.store.memory import MemoryStore
from redis_kit import RestartableRedis

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -------------------------------------------------------------------- unreachable store


def test_unreachable_redis_at_start_is_one_line_and_exit_2(tmp_path, capsys):
    """A refused connection is not tried again: nothing listens, and waiting will not help.

    (A start tries a connection that times out again for as long as its lease would wait,
    here ten minutes: the subprocess's timeout would end this test first.)
    """
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    argv = cli_argv()
    started = subprocess.run(
        [*argv, "run", str(GRAPH), "--store", url, "--input", f"log={tmp_path / 'log'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PHASEGRAPH_LEASE_TTL": "600"},
    )
    assert started.returncode == 2
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1, started.stderr
    assert lines[0].startswith("phasegraph: cannot reach Redis at ")
    assert url in lines[0]
    assert not (tmp_path / "log").exists()  # no action ran
    for command in (["resume", "r"], ["fork", "r"], ["replay", "r"], ["status"]):
        code, _, err = _cli(capsys, *command, "--store", url)
        assert code == 2
        assert err.count("\n") == 1
        assert "cannot reach Redis" in err


# ------------------------------------------------------------ connection lost mid-run


def _looping(marks: list[str], on_step: dict[int, object] | None = None):
    """Loops 6 times; records each execution; calls ``on_step[steps]()`` once if given."""

    async def work(ctx: ActionContext) -> ActionResult:
        marks.append(f"{ctx.node_id}:{ctx.steps}")
        hook = (on_step or {}).pop(ctx.steps, None)
        if callable(hook):
            hook()
        if ctx.steps >= 6:
            return ActionResult(trigger="stop")
        return ActionResult(trigger="again", data={"count": ctx.steps + 1})

    return work


async def _resume_when_lease_expires(url: str, run_id: str, plan) -> RunState:
    """Resume as a new process would: refused while the dead writer's lease lives."""
    deadline = time.monotonic() + 10
    async with open_store(url) as store:
        while True:
            try:
                return await engine(store, lease_ttl=1.0).resume(run_id, graph=plan)
            except LeaseHeldError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def test_connection_lost_mid_run_stops_at_last_commit_and_resume_continues(tmp_path):
    reference_marks: list[str] = []
    definition = graph([("a", [])], machine="loop")
    async with MemoryStore() as memory:
        reference = await engine(memory).run(
            prepared(definition, {("a", "work"): _looping(reference_marks)})
        )

    server = RestartableRedis(tmp_path)  # fsyncs every write: each commit survives a kill
    server.start()
    try:
        marks: list[str] = []
        # The action of step "a:3" kills the server: its commit cannot be made.
        plan = prepared(definition, {("a", "work"): _looping(marks, {3: server.kill})})
        async with open_store(server.url) as store:
            # Commits and renewals are retried while the lease lives; then the run stops.
            with pytest.raises(LeaseLostError, match="cannot reach Redis at") as caught:
                await engine(store, lease_ttl=1.0).run(plan, run_id="lost")
        assert str(server.port) in str(caught.value)
        assert "run 'lost' stopped at step" in str(caught.value)
        assert "phasegraph resume lost" in str(caught.value)

        server.start()  # same port, same append-only file: every commit survived
        async with open_store(server.url) as store:
            stopped = await Engine(store).get("lost")
        assert stopped.status is RunStatus.RUNNING
        assert stopped.nodes["a"].steps == 3  # the last committed step is a:2's
        # The commit in flight when the run stopped may or may not have landed.
        assert f"stopped at step {stopped.seq}" in str(caught.value)
        resumed = await _resume_when_lease_expires(server.url, "lost", plan)
    finally:
        server.kill()
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.data == reference.data
    assert resumed.seq == reference.seq
    assert resumed.nodes == reference.nodes
    counts = Counter(marks)
    assert set(counts) == set(reference_marks)
    assert {mark for mark, n in counts.items() if n > 1} == {"a:3"}  # only the step in flight


# ------------------------------------------------------------ unreadable stored payloads


async def _partial_run(url: str, log: Path) -> str:
    async with (
        open_store(url) as store,
        Engine(store).start(GRAPH, {"log": str(log), "loops": 3}) as run,
    ):
        for _ in range(4):
            await run.next()
        return run.run_id


def _dump(db: Path) -> list[tuple[object, ...]]:
    with sqlite_db(db) as conn:
        rows = []
        for table in ("runs", "records", "snapshots"):
            rows += [(table, *row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
    return rows


# The key of a run's row in ``records`` or ``snapshots``: (run_id, seq) as parameters.
_KEY = "(SELECT num << 32 FROM runs WHERE run_id = ?) + ?"


def _overwrite(db: Path, sql: str, *params: object) -> None:
    with sqlite_db(db) as conn:
        assert conn.execute(sql, params).rowcount == 1


@pytest.mark.parametrize(
    ("table", "seq", "blob", "message"),
    [
        (
            "records",
            3,
            msgpack.packb({"body": {}, "kind": "record", "v": 99}),
            "written in format version 99",
        ),
        ("snapshots", 0, b"\xc1 not msgpack", "not valid msgpack"),
        (
            "records",
            2,
            msgpack.packb({"body": 1, "kind": "snapshot", "v": 1}),
            "holds a 'snapshot'",
        ),
    ],
)
def test_unreadable_payload_is_refused_and_nothing_is_overwritten(
    tmp_path, capsys, table, seq, blob, message
):
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "log"
    run_id = asyncio.run(_partial_run(url, log))
    _overwrite(db, f"UPDATE {table} SET blob = ? WHERE key = {_KEY}", blob, run_id, seq)
    before, executions = _dump(db), log.read_text()

    for command in (["resume", run_id], ["show", run_id], ["fork", run_id], ["replay", run_id]):
        code, out, err = _cli(capsys, *command, "--store", url)
        assert code == 2, (command, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert message in lines[0]
        if command[0] in ("fork", "replay"):
            assert f"run {run_id!r}" in lines[0]
            assert f"at seq {seq}" in lines[0]
    assert _dump(db) == before  # nothing written, not even a lease
    assert log.read_text() == executions  # no action ran


# ------------------------------------------------------------ integrity: checksums, holes


def _flip_in_file(db: Path, blob: bytes) -> None:
    """Flip one bit of ``blob`` where it lies in the database file itself (as a bad disk)."""
    with sqlite_db(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    at = data.find(blob)
    assert at >= 0  # the blob lies in one page, once
    assert data.find(blob, at + 1) < 0
    data[at + len(blob) // 2] ^= 0x10
    db.write_bytes(bytes(data))


def _blob(db: Path, table: str, run_id: str, seq: int) -> bytes:
    with sqlite_db(db) as conn:
        (blob,) = conn.execute(
            f"SELECT blob FROM {table} WHERE key = {_KEY}", (run_id, seq)
        ).fetchone()
    return bytes(blob)


@pytest.mark.parametrize(("table", "seq"), [("records", 3), ("snapshots", 0)])
def test_a_flipped_bit_in_the_sqlite_file_is_refused_naming_run_and_seq(
    tmp_path, capsys, table, seq
):
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "log"
    run_id = asyncio.run(_partial_run(url, log))
    _flip_in_file(db, _blob(db, table, run_id, seq))
    before, executions = _dump(db), log.read_text()
    commands = [["resume", run_id], ["show", run_id], ["replay", run_id], ["fork", run_id]]
    if table == "records":
        commands.append(["history", run_id])
    for command in commands:
        code, out, err = _cli(capsys, *command, "--store", url)
        assert code == 2, (command, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"run {run_id!r}" in lines[0]
        assert f"at seq {seq} cannot be read" in lines[0]
        assert "checksum does not match" in lines[0]
    assert _dump(db) == before  # nothing written, not even a lease
    assert log.read_text() == executions  # no action ran


def test_a_missing_record_is_a_hole_named_by_run_and_seq(tmp_path, capsys):
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "log"
    run_id = asyncio.run(_partial_run(url, log))
    _overwrite(db, f"DELETE FROM records WHERE key = {_KEY}", run_id, 3)
    before, executions = _dump(db), log.read_text()
    for command in (["history"], ["show"], ["resume"], ["replay"], ["show", "--at", "3"]):
        code, out, err = _cli(capsys, command[0], run_id, *command[1:], "--store", url)
        assert code == 2, (command, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"run {run_id!r}: the step record at seq 3 is missing" in lines[0], command
    code, out, _ = _cli(capsys, "show", run_id, "--at", "2", "--store", url, "--json")
    assert code == 0  # before the hole, the run still reads
    assert _dump(db) == before
    assert log.read_text() == executions


def test_redis_corruption_and_holes_are_named_by_run_and_seq(tmp_path, redis_url):
    from phasegraph.errors import CodecError, JournalHeadError
    from phasegraph.testing import isolated_redis_store

    async def main() -> None:
        async with isolated_redis_store(redis_url) as store:
            inputs = {"log": str(tmp_path / "log"), "loops": 3}
            async with Engine(store).start(GRAPH, inputs) as run:
                for _ in range(6):
                    await run.next()
                run_id = run.run_id
            engine = Engine(store)
            client = redis.Redis.from_url(redis_url)
            key = next(k for k in client.scan_iter(f"*{{{run_id}}}:rec"))
            blob = bytearray(client.lindex(key, 3))
            blob[len(blob) // 2] ^= 0x01
            client.lset(key, 3, bytes(blob))
            for read in (engine.history(run_id), engine.get(run_id)):
                with pytest.raises(CodecError) as caught:
                    await read
                assert (caught.value.run_id, caught.value.seq) == (run_id, 3)
                assert "checksum does not match" in str(caught.value)
            client.lset(key, 3, client.lindex(key, 4))  # seq 3 missing, the list as long
            for read in (engine.history(run_id), engine.get(run_id)):
                with pytest.raises(CodecError, match=f"run '{run_id}': the step record at seq 3"):
                    await read
            client.lrem(key, 1, client.lindex(key, 4))  # the records after it move down
            for read in (engine.history(run_id), engine.get(run_id)):
                # The list is one short of the head now: the store refuses the run first.
                with pytest.raises(JournalHeadError, match=f"run '{run_id}': its head is seq 6"):
                    await read
            client.close()

    asyncio.run(main())
