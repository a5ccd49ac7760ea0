"""Run definitions outlive what the contract cannot show: the store object, the runs that
share them (retention included), and stores laid out before definitions were kept."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
import redis.asyncio

from builders import cli_argv
from phasegraph.errors import RunNotFoundError, StoreError
from phasegraph.store import Store, open_store
from phasegraph.store._postgres_schema import _V1, SCHEMA_VERSION
from phasegraph.store.redis import RedisStore
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import isolated_redis_url, make_commit
from postgres_kit import isolated_postgres_url, libpq_url, sql
from store.old_layouts import WITHOUT_DEFINITIONS, old_file
from store.old_layouts import sql as sqlite_sql

BODY = b"graph: shared\n" * 1000
KEY = hashlib.sha256(BODY).hexdigest()


async def _finish(store: Store, run_id: str) -> None:
    """Commit a run of two steps that ends completed (retention's start), and release it."""
    lease = await store.acquire(run_id, "w1", 30)
    await store.commit(lease, make_commit(run_id, 0))
    await store.commit(lease, make_commit(run_id, 1, status="completed"))
    await store.release(lease)


async def _kept(store: Store) -> None:
    assert await store.has_definition(KEY)
    assert await store.get_definition(KEY) == BODY


# ------------------------------------------------------------------------------ SQLite


async def test_a_reopened_sqlite_file_keeps_its_definitions(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        await store.put_definition(KEY, BODY)
    async with SqliteStore(path) as store:
        await _kept(store)
    async with SqliteStore(path, read_only=True) as reader:
        await _kept(reader)
        with pytest.raises(StoreError, match="read-only"):
            await reader.put_definition(hashlib.sha256(b"x").hexdigest(), b"x")
    assert sqlite_sql(path, "SELECT count(*) FROM definitions") == [(1,)]


def _layout(path: Path) -> set[tuple[object, ...]]:
    return set(
        sqlite_sql(path, "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    )


@pytest.mark.parametrize("version", sorted(WITHOUT_DEFINITIONS))
async def test_a_file_laid_out_before_definitions_gets_their_table_when_opened_to_write(
    tmp_path: Path, version: int
) -> None:
    """Read-only, such a file keeps no definition (nor live stream) and is left alone;
    opened to write, it gets the tables and keeps its version (older phasegraphs still
    open it)."""
    path = old_file(tmp_path / "runs.db", version)
    before = _layout(path)
    async with SqliteStore(path, read_only=True) as reader:
        assert await reader.read_stream("r") == []
        assert await reader.get_definition(KEY) is None
        assert not await reader.has_definition(KEY)
        with pytest.raises(StoreError, match="read-only"):
            await reader.put_definition(KEY, BODY)
    assert _layout(path) == before
    async with SqliteStore(path) as store:
        assert await store.get_definition(KEY) is None
        await store.put_definition(KEY, BODY)
        await _kept(store)
    inbox = {("table", "messages"), ("table", "messages_taken")}
    streams = {("table", "streams"), ("index", "streams_run")}
    assert _layout(path) == before | {("table", "definitions")} | inbox | streams
    assert sqlite_sql(path, "PRAGMA user_version") == [(version,)]
    async with SqliteStore(path, read_only=True) as reader:
        await _kept(reader)


# ------------------------------------------------------------------------------- Redis


@pytest.mark.redis
@pytest.mark.parametrize("server", ["redis_url", "redis_cluster_url"])
async def test_a_reopened_redis_store_keeps_its_definitions_past_retention(
    server: str, request: pytest.FixtureRequest
) -> None:
    """A definition has no expiry: the finished run that used it expires, it stays."""
    async with isolated_redis_url(request.getfixturevalue(server), ttl="0.05") as url:
        async with open_store(url) as store:
            await store.put_definition(KEY, BODY)
            await _finish(store, "r")
        await asyncio.sleep(0.2)  # past the run's 50 ms retention
        async with open_store(url) as store:
            assert isinstance(store, RedisStore)
            with pytest.raises(RunNotFoundError):
                await store.read("r")
            await _kept(store)
            client = store.queue_client()
            try:
                assert await client.pttl(store.definition_key(KEY)) == -1
            finally:
                await client.aclose()


@pytest.mark.redis
async def test_a_definition_is_one_key_set_once(redis_url: str) -> None:
    async with isolated_redis_url(redis_url) as url, open_store(url) as store:
        assert isinstance(store, RedisStore)
        await store.put_definition(KEY, BODY)
        await store.put_definition(KEY, BODY)
        direct = redis.asyncio.Redis.from_url(redis_url)
        try:
            keys = [k.decode() async for k in direct.scan_iter(match=f"{store.prefix}:*")]
            assert keys == [f"{store.prefix}:def:{KEY}"]
            assert await direct.get(keys[0]) == BODY
        finally:
            await direct.aclose()


# ---------------------------------------------------------------------------- Postgres


async def test_a_reopened_postgres_store_keeps_its_definitions_past_retention(
    postgres_url: str,
) -> None:
    """The retention sweep deletes a finished run's rows, never a definition."""
    with isolated_postgres_url(postgres_url, ttl="0.05") as url:
        async with open_store(url) as store:
            await store.put_definition(KEY, BODY)
            await _finish(store, "old")
        await asyncio.sleep(0.2)  # past the run's 50 ms retention
        async with open_store(url) as store:
            await _finish(store, "new")  # a run that finishes sweeps the expired ones
            assert sql(url, "SELECT count(*) FROM runs WHERE run_id = 'old'") == [(0,)]
            await _kept(store)


def test_store_migrate_brings_a_version_1_schema_up(postgres_url: str) -> None:
    """A schema an older phasegraph made (version 1, a run in it) gets the definitions
    table (and every later one) from ``phasegraph store migrate``; its run reads as before."""
    assert SCHEMA_VERSION == 4
    with isolated_postgres_url(postgres_url) as url:
        schema = dict(parse_qsl(urlsplit(url).query))["schema"]
        with psycopg.connect(libpq_url(url), autocommit=True) as conn, conn.transaction():
            for statement in _V1:
                conn.execute(statement.format(s=f'"{schema}"').encode())
        sql(
            url,
            "INSERT INTO runs (run_id, graph, status, seq, created_at, updated_at, listed) "
            "VALUES ('old', 'g', 'completed', 0, 1.0, 2.0, 0.0)",
        )
        sql(url, "INSERT INTO records VALUES ('old', 0, 'record-0'::bytea)")
        sql(url, "INSERT INTO snapshots VALUES ('old', 0, 'snapshot-0'::bytea)")
        done = subprocess.run(
            cli_argv("store", "migrate", url, "--json"),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        migrated = json.loads(done.stdout)
        assert (migrated["found"], migrated["version"], migrated["migrated"]) == (1, 4, True)
        assert sql(url, "SELECT version FROM schema_version") == [(4,)]

        async def use() -> None:
            async with open_store(url) as store:
                assert (await store.read("old")).snapshot == b"snapshot-0"
                assert await store.get_definition(KEY) is None
                await store.put_definition(KEY, BODY)
                await _kept(store)

        asyncio.run(use())
