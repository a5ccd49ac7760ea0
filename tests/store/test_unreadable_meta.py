"""One run's damaged metadata: listing shows the others and marks that one unreadable.

Each test damages a real store the way a disk fault or a hand edit would (an SQL UPDATE on
the file, an HSET on the server), then lists and reads through phasegraph.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

from builders import cli_argv, sqlite_db
from phasegraph.errors import StoreError
from phasegraph.store import Store, open_store
from phasegraph.store.redis import RedisStore
from phasegraph.testing import isolated_redis_store, make_commit

# (column or field, damaged value, words of the reason)
DAMAGE = [
    ("status", "bogus", "status is 'bogus', not a run status"),
    ("updated_at", "yesterday", "updated_at is"),
    ("graph", None, "graph is None"),
    ("seq", "x", "seq is"),
]


async def three_runs(store: Store) -> None:
    for index, run_id in enumerate(("a", "b", "c")):
        lease = await store.acquire(run_id, "w", 30)
        await store.commit(lease, make_commit(run_id, 0, updated_at=1000.0 + index))
        await store.release(lease)


async def check_listing(store: Store, words: str) -> None:
    listed = await store.list_runs()
    assert [meta.run_id for meta in listed if meta.unreadable is None] == ["c", "a"]
    (damaged,) = [meta for meta in listed if meta.unreadable is not None]
    assert damaged.run_id == "b"
    assert words in damaged.unreadable
    assert [m.run_id for m in await store.list_runs(status="running") if not m.unreadable] == [
        "c",
        "a",
    ]
    with pytest.raises(StoreError, match="run 'b' has unreadable metadata"):
        await store.read("b")
    assert (await store.read("a")).meta.graph == "g"


@pytest.mark.parametrize(("column", "value", "words"), DAMAGE)
async def test_sqlite_lists_the_other_runs(
    tmp_path: Path, column: str, value: object, words: str
) -> None:
    path = tmp_path / "runs.db"
    async with open_store(f"sqlite:///{path}") as store:
        await three_runs(store)
        with sqlite_db(path) as damage:
            damage.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'b'", (value,))
        await check_listing(store, words)


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[RedisStore]:
    async with isolated_redis_store(redis_url) as opened:
        assert isinstance(opened, RedisStore)
        yield opened


@pytest.mark.redis
@pytest.mark.parametrize(("field", "value", "words"), DAMAGE)
async def test_redis_lists_the_other_runs(
    redis_store: RedisStore, redis_url: str, field: str, value: str | None, words: str
) -> None:
    await three_runs(redis_store)
    meta_key = redis_store.run_keys("b")[0]
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        if value is None:
            await client.hdel(meta_key, field)
        else:
            await client.hset(meta_key, field, value)
    finally:
        await client.aclose()
    await check_listing(redis_store, words)


def test_status_lists_the_other_runs(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    for run_id in ("first", "broken", "last"):
        done = subprocess.run(
            cli_argv("run", "hello", "--run-id", run_id, "-q", "--store", store),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    with sqlite_db(tmp_path / "runs.db") as damage:
        damage.execute("UPDATE runs SET updated_at = 'x' WHERE run_id = 'broken'")
    status = subprocess.run(
        cli_argv("status", "--store", store), capture_output=True, text=True, check=False
    )
    assert status.returncode == 0, status.stderr
    assert "Traceback" not in status.stderr
    lines = status.stdout.splitlines()
    # Where the damaged run sits depends on the minute each run was listed in (the index
    # orders by minute first); the others keep their order, most recent first.
    (damaged,) = [line for line in lines if line.split()[0] == "broken"]
    assert damaged.split(None, 1)[1].startswith("unreadable: updated_at is 'x', not a time")
    others = [line for line in lines if line != damaged]
    assert [line.split()[0] for line in others] == ["last", "first"]
    assert all("completed" in line for line in others)
