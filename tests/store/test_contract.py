"""The store contract, run against every backend phasegraph ships (Redis: a server and a
three-primary cluster)."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from phasegraph.store import Store, open_store
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import StoreContract, isolated_redis_store


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        async with MemoryStore() as store:
            yield store


class TestSqliteStore(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        async with open_store(f"sqlite:///{tmp_path}/runs.db") as store:
            yield store


class TestSqliteStoreFullSync(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        async with open_store(f"sqlite:///{tmp_path}/runs.db?synchronous=full") as store:
            yield store


@pytest.mark.redis
class TestRedisStore(StoreContract):
    @pytest.fixture
    async def store(self, redis_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_url) as store:
            yield store


@pytest.mark.redis
class TestRedisStoreWithRetention(StoreContract):
    @pytest.fixture
    async def store(self, redis_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_url, ttl="60") as store:
            yield store


@pytest.mark.redis
class TestRedisClusterStore(StoreContract):
    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_cluster_url) as store:
            yield store


@pytest.mark.redis
class TestRedisClusterStoreWithRetention(StoreContract):
    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[Store]:
        async with isolated_redis_store(redis_cluster_url, ttl="60") as store:
            yield store
