"""The store contract, run against every backend phasegraph ships (Redis: a server and a
three-primary cluster; Postgres: a schema of its own per test)."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from phasegraph.store import Store, open_store
from phasegraph.store.memory import MemoryStore
from phasegraph.store.redis import RedisStore
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import JournalDamage, StoreContract, isolated_redis_store
from postgres_kit import isolated_postgres_url
from store.journal_damage import MemoryDamage, PostgresDamage, RedisDamage, SqliteDamage
from store.old_layouts import old_file


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        async with MemoryStore() as store:
            yield store

    @pytest.fixture
    async def journal_damage(self, store: Store) -> JournalDamage:
        assert isinstance(store, MemoryStore)
        return MemoryDamage(store)


class _Sqlite(StoreContract):
    @pytest.fixture
    async def journal_damage(self, store: Store) -> JournalDamage:
        assert isinstance(store, SqliteStore)
        return SqliteDamage(store.path)


class TestSqliteStore(_Sqlite):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        async with open_store(f"sqlite:///{tmp_path}/runs.db") as store:
            yield store


class TestSqliteStoreVersion2File(_Sqlite):
    """A file in the layout phasegraph wrote before version 3 keeps the whole contract."""

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        path = old_file(tmp_path / "runs.db", 2)
        async with open_store(f"sqlite:///{path}") as store:
            yield store


class TestSqliteStoreFullSync(_Sqlite):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        async with open_store(f"sqlite:///{tmp_path}/runs.db?synchronous=full") as store:
            yield store


class _Redis(StoreContract):
    @pytest.fixture
    async def journal_damage(self, store: Store) -> AsyncIterator[JournalDamage]:
        assert isinstance(store, RedisStore)
        damage = RedisDamage(store)
        try:
            yield damage
        finally:
            await damage.aclose()


@pytest.mark.redis
class TestRedisStore(_Redis):
    @pytest.fixture
    async def store(self, redis_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_url) as store:
            yield store


@pytest.mark.redis
class TestRedisStoreWithRetention(_Redis):
    @pytest.fixture
    async def store(self, redis_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_url, ttl="60") as store:
            yield store


@pytest.mark.redis
class TestRedisClusterStore(_Redis):
    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_cluster_url) as store:
            yield store


@pytest.mark.redis
class TestRedisClusterStoreWithRetention(_Redis):
    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_cluster_url, ttl="60") as store:
            yield store


class _Postgres(StoreContract):
    options: ClassVar[dict[str, str]] = {}

    @pytest.fixture
    async def store_url(self, postgres_url: str) -> AsyncIterator[str]:
        with isolated_postgres_url(postgres_url, **self.options) as url:
            yield url

    @pytest.fixture
    async def store(self, store_url: str) -> AsyncIterator[Store]:
        async with open_store(store_url) as store:
            yield store

    @pytest.fixture
    async def journal_damage(self, store_url: str, store: Store) -> JournalDamage:
        return PostgresDamage(store_url)


class TestPostgresStore(_Postgres):
    pass


class TestPostgresStoreWithRetention(_Postgres):
    options: ClassVar[dict[str, str]] = {"ttl": "60"}


class TestPostgresStoreWithOnePooledConnection(_Postgres):
    """Concurrent calls wait for the one connection rather than failing."""

    options: ClassVar[dict[str, str]] = {"pool": "1"}
