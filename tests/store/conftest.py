"""Fixtures of the store tests."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

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


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds each ``asyncio.sleep`` of the test waited, in order (yields left out).

    The sleeps still happen. A test checks a retry schedule by what the code chose to wait,
    which a loaded machine cannot change, rather than by the wall clock, which it can.
    """
    delays: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float, result: Any = None) -> Any:
        if delay > 0:
            delays.append(delay)
        return await sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    return delays
