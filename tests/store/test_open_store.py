"""Choosing a store by URL, and clear refusals of bad URLs and bad database files."""

import os
from pathlib import Path

import pytest

import phasegraph.store
from builders import sqlite_db
from phasegraph.errors import InputError, StoreError, StoreUnavailableError
from phasegraph.store import DEFAULT_STORE_URL, open_store
from phasegraph.store._redis_wire import ClusterWire
from phasegraph.store._sqlite_layout import SCHEMA_VERSION
from phasegraph.store.memory import MemoryStore
from phasegraph.store.postgres import PostgresStore
from phasegraph.store.redis import RedisStore
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import make_commit


def test_exports() -> None:
    expected = {"Store", "Lease", "Commit", "RunMeta", "StoredRun", "open_store"}
    assert expected | {"DEFAULT_STORE_URL"} <= set(phasegraph.store.__all__)
    assert DEFAULT_STORE_URL == "sqlite:///.phasegraph/runs.db"


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///.phasegraph/runs.db", Path(".phasegraph/runs.db")),
        ("sqlite:///runs.db?synchronous=full", Path("runs.db")),
        ("sqlite:////var/lib/pg/runs.db", Path("/var/lib/pg/runs.db")),
        ("sqlite:///my%20runs.db", Path("my runs.db")),
    ],
)
def test_sqlite_urls(url: str, path: Path) -> None:
    store = open_store(url)
    assert isinstance(store, SqliteStore)
    assert store.path == path.absolute()


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        ("redis://localhost:6379/0", "pg"),
        ("redis://localhost", "pg"),
        ("rediss://user:secret@example.test:6380/2?prefix=team&ttl=3600", "team"),
        ("unix:///run/redis.sock?db=1&prefix=x1", "x1"),
        ("redis://localhost/0?prefix=app:pg", "app:pg"),
        ("redis://localhost/0?ttl=0.5&socket_timeout=3", "pg"),
        ("redis+cluster://localhost:7000", "pg"),
        ("rediss+cluster://user:secret@example.test:7000/0?prefix=team&ttl=60", "team"),
    ],
)
def test_redis_urls(url: str, prefix: str) -> None:
    store = open_store(url)
    assert isinstance(store, RedisStore)
    assert store.prefix == prefix
    # A cluster URL talks to the cluster's nodes, any other to one server's connection.
    assert isinstance(store._wire, ClusterWire) is ("+cluster" in url)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("runs.db", "no scheme"),
        ("mysql://localhost/db", "unknown scheme 'mysql'"),
        ("postgresql://localhost:port/db", "port is not a number"),
        ("postgresql:///db", "names no host"),
        ("postgres://localhost/a/b", "has a slash"),
        ("postgresql://localhost/db?schema=Runs", "schema 'Runs' is not a plain"),
        ("postgresql://localhost/db?schema=a-b", "is not a plain lower-case name"),
        ("postgresql://localhost/db?ttl=0", "ttl must be a positive"),
        ("postgresql://localhost/db?pool=0", "pool must be a whole number"),
        ("postgresql://localhost/db?pool=many", "pool must be a whole number"),
        ("postgresql://localhost/db?sslmod=require", "unknown option 'sslmod'"),
        ("memory://name", "takes no path"),
        ("sqlite://host/runs.db", "unexpected host"),
        ("sqlite:///", "names no database file"),
        ("sqlite:///dir/", "names no database file"),
        ("sqlite:///runs.db?synchronous=off", "synchronous must be one of normal, full"),
        ("sqlite:///runs.db?journal=wal", "unknown option 'journal'"),
        ("redis://localhost:notaport/0", "port is not a number"),
        ("redis:///0", "names no host"),
        ("redis://localhost/zero", "database 'zero' is not a number"),
        ("redis://localhost/0?ttl=-5", "ttl must be a positive"),
        ("redis://localhost/0?ttl=soon", "'soon' is not a number"),
        ("redis://localhost/0?prefix=", "prefix must be non-empty"),
        ("redis://localhost/0?prefix=a{b}", "prefix must be non-empty"),
        ("redis://localhost/0?prefix=a%20b", "prefix must be non-empty"),
        ("redis://localhost/0?prefix=a&prefix=b", "given twice"),
        ("redis://localhost/0?colour=red", "unknown option 'colour'"),
        ("redis://localhost/0?ssl_ca_certs=/ca.pem", "unknown option 'ssl_ca_certs'"),
        ("unix:///tmp/r.sock?ssl_cert_reqs=none", "unknown option 'ssl_cert_reqs'"),
        ("rediss://localhost/0?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of"),
        ("unix://", "needs a socket path"),
        ("redis+cluster:///0", "names no host"),
        ("redis+cluster://localhost:7000/1", "database 0 only"),
        ("redis+cluster://localhost:7000?db=2", "database 0 only"),
        ("redis+cluster://localhost/0?ssl_ca_certs=/ca.pem", "unknown option 'ssl_ca_certs'"),
    ],
)
def test_bad_urls_name_the_url_and_the_accepted_forms(url: str, why: str) -> None:
    with pytest.raises(InputError) as caught:
        open_store(url)
    message = str(caught.value)
    assert why in message
    assert repr(url) in message
    for form in ("memory://", "sqlite:///", "redis://", "rediss://", "unix://", "postgresql://"):
        assert form in message


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("rediss://:hunter2@localhost/0?ssl_ca_certs=/no/ca.pem", "ssl_ca_certs '/no/ca.pem'"),
        ("rediss://:hunter2@localhost/0?ssl_certfile=/no/me.pem", "ssl_certfile '/no/me.pem'"),
        ("redis://:hunter2@localhost/0?socket_timeout=soon", "socket_timeout"),
        ("rediss+cluster://:hunter2@localhost/0?ssl_ca_certs=/no/ca.pem", "ssl_ca_certs"),
        ("redis+cluster://:hunter2@localhost/0?socket_timeout=soon", "socket_timeout"),
    ],
)
def test_unusable_redis_options_are_refused_at_once(url: str, why: str) -> None:
    with pytest.raises(InputError, match=why) as caught:
        open_store(url)
    assert "hunter2" not in str(caught.value)


def test_bad_url_message_hides_the_password() -> None:
    with pytest.raises(InputError) as caught:
        open_store("redis://me:hunter2@localhost/0?ttl=never")
    assert "hunter2" not in str(caught.value)
    assert "me:***@localhost" in str(caught.value)
    with pytest.raises(InputError) as caught:
        open_store("redis://localhost/0?password=hunter2&bogus=1")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "schema"),
    [
        ("postgresql://localhost/db", "phasegraph"),
        ("postgres://me:secret@db.example.test:6543/runs?schema=team_a&ttl=60", "team_a"),
        ("postgresql:///runs?host=/var/run/postgresql&sslmode=disable&pool=2", "phasegraph"),
        ("postgresql://localhost/db?options=-c%20statement_timeout%3D5000", "phasegraph"),
    ],
)
def test_postgres_urls(url: str, schema: str) -> None:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert store.schema == schema
    assert "secret" not in store.where


def test_bad_postgres_url_hides_the_password() -> None:
    for url in (
        "postgresql://me:hunter2@localhost/db?schema=Bad",
        "postgresql://localhost/db?password=hunter2&bogus=1",
    ):
        with pytest.raises(InputError) as caught:
            open_store(url)
        assert "hunter2" not in str(caught.value)


async def test_sqlite_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "runs.db"
    async with open_store(f"sqlite:///{path}") as store:
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
    assert path.is_file()
    async with open_store(f"sqlite:///{path}") as store:  # reopening keeps the data
        assert (await store.read("r")).meta.seq == 0


async def test_sqlite_relative_path_is_under_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_store(DEFAULT_STORE_URL) as store:
        await store.list_runs()
    assert (tmp_path / ".phasegraph" / "runs.db").is_file()


async def test_sqlite_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    async with open_store(f"sqlite:///{blocker}/runs.db") as store:
        with pytest.raises(StoreUnavailableError, match=str(blocker)):
            await store.list_runs()


async def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(os.urandom(4096))
    async with open_store(f"sqlite:///{path}") as store:
        with pytest.raises(StoreError, match="not a phasegraph run store"):
            await store.list_runs()
    assert len(path.read_bytes()) == 4096


async def test_sqlite_refuses_a_foreign_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite_db(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    async with open_store(f"sqlite:///{path}") as store:
        with pytest.raises(StoreError, match=r"not a phasegraph run store.*tables"):
            await store.read("r")


async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.list_runs()
    with sqlite_db(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    async with open_store(f"sqlite:///{path}") as store:
        with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer"):
            await store.list_runs()


async def test_sqlite_store_refuses_use_after_close(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    await store.aclose()
    with pytest.raises(StoreUnavailableError, match="closed"):
        await store.list_runs()
