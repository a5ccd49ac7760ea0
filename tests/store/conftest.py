"""Fixtures of the store tests."""

from collections.abc import AsyncIterator

import pytest

from phasegraph.store.redis import RedisStore
from phasegraph.testing import isolated_redis_store


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    """A Redis store under a key prefix of its own on the suite's server.

    Modules that test other stores (the contract suite, the cluster) define their own.
    """
    async with isolated_redis_store(redis_url) as opened:
        assert isinstance(opened, RedisStore)
        yield opened
