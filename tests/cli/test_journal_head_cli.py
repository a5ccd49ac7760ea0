"""A run whose journal does not end at its head: every command refuses it in one line.

Each test damages a real store as a hand edit would (SQL on the SQLite file, commands on
the Redis server): the head's step record deleted, or the head seq in the metadata rolled
back one step. The real command line, in a subprocess, then refuses the run for
``history``, ``history --json``, ``show``, ``replay`` and ``resume``: exit 2, one line on
stderr naming the run and the seqs, no traceback, nothing printed as if the run were
whole; ``status`` lists it as unreadable, with the reason. ``resume`` runs no action,
and the store is left exactly as it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio

from builders import TESTS, cli_argv, sqlite_db
from phasegraph import Engine, open_store
from phasegraph.store._open import journal_head_problem
from phasegraph.store.redis import RedisStore
from phasegraph.testing import JournalDamage, isolated_redis_url
from store.journal_damage import RedisDamage, SqliteDamage

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"
HEAD = 4  # the head of the partial run: records 0 to 4
COMMANDS = (["history"], ["history", "--json"], ["show"], ["replay"], ["resume"])

# (damage, the head the metadata names after it, the last record stored after it)
DAMAGE: list[tuple[Callable[[JournalDamage, str], Awaitable[None]], int, int]] = [
    (lambda damage, run_id: damage.drop_last_record(run_id), HEAD, HEAD - 1),
    (lambda damage, run_id: damage.set_head(run_id, HEAD - 1), HEAD - 1, HEAD),
]
IDS = ["last-record-deleted", "head-rolled-back"]


async def _partial_run(url: str, log: Path) -> str:
    """A run stopped at seq :data:`HEAD` with its lease released: ``resume`` would go on."""
    async with (
        open_store(url) as store,
        Engine(store).start(GRAPH, {"log": str(log), "loops": 3}) as run,
    ):
        for _ in range(HEAD):
            await run.next()
        assert run.state.seq == HEAD
        return run.run_id


async def _cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *cli_argv(*args),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _every_command_refuses(url: str, run_id: str, head: int, last: int, cwd: Path) -> None:
    for command in COMMANDS:
        code, out, err = await _cli(command[0], run_id, *command[1:], "--store", url, cwd=cwd)
        assert code == 2, (command, out, err)
        assert "Traceback" not in err
        lines = err.splitlines()
        assert len(lines) == 1, (command, err)
        named = f"phasegraph: run {run_id!r}: its head is seq {head} but its journal "
        assert lines[0].startswith(named), (command, err)
        assert f"seq {max(head, last)} is " in lines[0]
        assert "changed outside phasegraph" in lines[0]
        assert "nothing was re-run or overwritten" in lines[0]
        if "--json" in command:
            error = json.loads(out)["error"]
            assert error["code"] == "journal_head_mismatch"
            assert (error["run_id"], error["seq"], error["last_stored_seq"]) == (run_id, head, last)
        else:
            assert out == "", command  # no record, state or report of a run cut short
    # The list of runs shows it damaged, with the reason, not with the status it names.
    code, out, err = await _cli("status", "--store", url, cwd=cwd)
    assert (code, err) == (0, "")
    (line,) = out.splitlines()
    assert line.split(None, 1) == [run_id, f"unreadable: {_why(head, last)}"]
    code, out, err = await _cli("status", "--store", url, "--json", cwd=cwd)
    assert (code, err) == (0, "")
    assert json.loads(out) == [{"run_id": run_id, "unreadable": _why(head, last)}]


def _why(head: int, last: int) -> str:
    """How ``status`` says the run is damaged: as a read of it does, and why."""
    return f"{journal_head_problem(head, last)}: changed outside phasegraph, or damaged"


def _sqlite_rows(db: Path) -> list[tuple[object, ...]]:
    """Every row of the store file (the lease columns too)."""
    with sqlite_db(db) as conn:
        rows = []
        for table in ("runs", "records", "snapshots"):
            rows += [(table, *row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
    conn.close()
    return rows


@pytest.mark.parametrize(("damage", "head", "last"), DAMAGE, ids=IDS)
async def test_sqlite(
    tmp_path: Path,
    damage: Callable[[JournalDamage, str], Awaitable[None]],
    head: int,
    last: int,
) -> None:
    db, log = tmp_path / "runs.db", tmp_path / "log"
    url = f"sqlite:///{db}"
    run_id = await _partial_run(url, log)
    await damage(SqliteDamage(db), run_id)
    rows, marks = _sqlite_rows(db), log.read_text()
    await _every_command_refuses(url, run_id, head, last, tmp_path)
    assert _sqlite_rows(db) == rows  # nothing written, not even a lease
    assert log.read_text() == marks  # no action ran


async def _redis_keys(client: redis.asyncio.Redis, prefix: str) -> dict[bytes, bytes | None]:
    """Every key of the store and its serialized value (DUMP)."""
    keys = sorted([key async for key in client.scan_iter(match=f"{prefix}:*")])
    return {key: await client.dump(key) for key in keys}


@pytest.mark.redis
@pytest.mark.parametrize(("damage", "head", "last"), DAMAGE, ids=IDS)
async def test_redis(
    tmp_path: Path,
    redis_url: str,
    damage: Callable[[JournalDamage, str], Awaitable[None]],
    head: int,
    last: int,
) -> None:
    log = tmp_path / "log"
    async with isolated_redis_url(redis_url) as url:
        run_id = await _partial_run(url, log)
        async with open_store(url) as store:
            assert isinstance(store, RedisStore)
            tools = RedisDamage(store)
            try:
                await damage(tools, run_id)
            finally:
                await tools.aclose()
            prefix = store.prefix
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            keys, marks = await _redis_keys(client, prefix), log.read_text()
            await _every_command_refuses(url, run_id, head, last, tmp_path)
            assert await _redis_keys(client, prefix) == keys  # no record, lease or token
        finally:
            await client.aclose()
    assert log.read_text() == marks  # no action ran
