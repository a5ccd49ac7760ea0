"""A Redis restart under a live client: the first call after it answers, none is refused.

A private redis-server that keeps every write (its append-only file) is stopped and
started again on the same port while a store and its work queue hold connections to it.
"""

from __future__ import annotations

import asyncio

import pytest

from phasegraph import open_store
from phasegraph.errors import StoreUnavailableError
from phasegraph.store.redis import RedisStore
from redis_kit import RestartableRedis, slow_load
from redis_kit import server as server  # the fixture

pytestmark = pytest.mark.redis


async def test_the_queue_answers_the_first_call_after_a_restart(server: RestartableRedis) -> None:
    async with open_store(server.url) as store:
        assert isinstance(store, RedisStore)
        queue = store.work_queue()
        try:
            await queue.request_cancel("r1", "enough")
            # Several connections in the pool, idle when the server goes.
            found = await asyncio.gather(*(queue.cancel_requested("r1") for _ in range(4)))
            assert found == [{"reason": "enough", "actor": None}] * 4
            server.stop()
            server.start()
            # Each of them was closed by the old server; the calls still answer.
            found = await asyncio.gather(*(queue.cancel_requested("r1") for _ in range(4)))
            assert found == [{"reason": "enough", "actor": None}] * 4
        finally:
            await queue.aclose()


async def test_a_read_while_redis_loads_its_data_is_unavailable_not_refused(
    server: RestartableRedis,
) -> None:
    server.fill(20_000, 100)  # enough to take a while to load again, with a delay per key
    async with open_store(server.url) as store:
        assert await store.list_runs() == []
        server.stop()
        with pytest.raises(StoreUnavailableError):  # the store sees its connection go
            await store.list_runs()
        server.start(*slow_load(100), ready=False)
        # Answered -LOADING: the store is not ready yet, which a caller retries (a
        # refusal would make a worker give up on the run, or a command report a fault).
        with pytest.raises(StoreUnavailableError, match="is not ready: LOADING"):
            await store.list_runs()
