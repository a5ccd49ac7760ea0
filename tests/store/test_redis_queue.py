"""The workers' queue on a real Redis: delivery, reclaim, deadlines, trimming, layout.

Each property here is one the worker's guarantee rests on: an entry stays pending until
acknowledged (a dead worker's entries are never lost), only idle entries are taken over,
a deadline moves its run into the stream once and only when due, and trimming never
drops an entry someone still holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from phasegraph.store._redis_queue import RunQueue
from phasegraph.store.redis import RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
async def queue(store: RedisStore) -> AsyncIterator[RunQueue]:
    opened = store.work_queue()
    yield opened
    await opened.aclose()


async def test_an_entry_stays_pending_until_acknowledged_and_trim_keeps_it(
    queue: RunQueue,
) -> None:
    await queue.enqueue("run-a")
    (taken,) = await queue.take(0, "c1", count=10, block_ms=10)
    assert (taken.run_id, taken.deliveries) == ("run-a", 1)
    assert await queue.take(0, "c2", count=10, block_ms=10) == []  # one consumer only
    assert await queue.trim(0) == 0  # taken, not acknowledged: kept
    assert await queue.pending(0) == 1
    # Still there for whoever takes over: the second delivery says so.
    (again,) = await queue.reclaim(0, "c2", idle_ms=0, count=10)
    assert (again.entry_id, again.deliveries) == (taken.entry_id, 2)
    await queue.ack(again)
    assert await queue.pending(0) == 0
    assert await queue.trim(0) == 1


async def test_only_entries_idle_long_enough_are_taken_over(queue: RunQueue) -> None:
    for run_id in ("run-a", "run-b"):
        await queue.enqueue(run_id)
    taken = await queue.take(0, "c1", count=10, block_ms=10)
    assert [entry.run_id for entry in taken] == ["run-a", "run-b"]
    assert await queue.reclaim(0, "c2", idle_ms=60_000, count=10) == []
    await queue.touch("c1", taken)  # the heartbeat keeps them c1's
    assert await queue.reclaim(0, "c2", idle_ms=60_000, count=10) == []
    moved = await queue.reclaim(0, "c2", idle_ms=0, count=10)
    assert [(entry.run_id, entry.deliveries) for entry in moved] == [("run-a", 2), ("run-b", 2)]


async def test_a_deadline_moves_its_run_into_the_stream_once_when_due(queue: RunQueue) -> None:
    now_ms = int(time.time() * 1000)
    await queue.schedule("run-due", now_ms - 1_000)
    await queue.schedule("run-later", now_ms + 600_000)
    moved, following = await queue.move_due(0)
    assert moved == 1
    assert following is not None
    assert 500 < following <= 600
    assert (await queue.move_due(0))[0] == 0  # moved once
    (entry,) = await queue.take(0, "c1", count=10, block_ms=10)
    assert entry.run_id == "run-due"
    assert await queue.deadline("run-due") is None
    assert await queue.deadline("run-later") == now_ms + 600_000
    await queue.unschedule("run-later")
    assert await queue.move_due(0) == (0, None)


async def test_the_first_client_fixes_the_partitions_for_every_later_one(
    store: RedisStore,
) -> None:
    first, later = store.work_queue(partitions=4), store.work_queue(partitions=2)
    try:
        assert await first.partitions() == 4
        assert await later.partitions() == 4
        run_ids = [f"run-{i}" for i in range(64)]
        spread = {await later.partition_of(run_id) for run_id in run_ids}
        assert spread == {0, 1, 2, 3}
        assert [await first.partition_of(r) for r in run_ids] == [
            await later.partition_of(r) for r in run_ids
        ]
        # A run's entries go to its partition's stream, where a worker of it finds them.
        await first.enqueue("run-7")
        partition = await later.partition_of("run-7")
        (entry,) = await later.take(partition, "c1", count=10, block_ms=10)
        assert (entry.partition, entry.run_id) == (partition, "run-7")
    finally:
        await first.aclose()
        await later.aclose()


async def test_a_deleted_stream_is_made_again_on_the_next_take(
    store: RedisStore, queue: RunQueue
) -> None:
    await queue.enqueue("run-a")
    await queue.take(0, "c1", count=10, block_ms=10)
    client = store.queue_client()
    await client.delete(queue.work_key(0))
    await client.aclose()
    assert await queue.take(0, "c1", count=10, block_ms=10) == []
    await queue.enqueue("run-b")
    (entry,) = await queue.take(0, "c1", count=10, block_ms=10)
    assert entry.run_id == "run-b"


async def test_many_runs_queued_at_once_wait_for_connections_instead_of_failing(
    store: RedisStore,
) -> None:
    # A busy `serve --queue` enqueues from many requests at once: more than the pool holds.
    queue = store.work_queue(partitions=3)
    try:
        run_ids = [f"run-{i}" for i in range(500)]
        await asyncio.gather(*(queue.enqueue(run_id) for run_id in run_ids))
        taken = []
        for partition in range(await queue.partitions()):
            taken += await queue.take(partition, "c1", count=1000, block_ms=10)
        assert sorted(entry.run_id for entry in taken) == sorted(run_ids)
    finally:
        await queue.aclose()


async def test_a_run_counts_as_queued_until_its_last_entry_is_acknowledged(
    store: RedisStore, queue: RunQueue
) -> None:
    # Only reading: a store where no queue was used records no partition count.
    assert await queue.queued("run-a") is False
    client = store.queue_client()
    assert await client.exists(f"{store.prefix}:{{q}}:partitions") == 0
    await client.aclose()
    await queue.enqueue("run-a")
    await queue.enqueue("run-a")  # e.g. a reply landing while it is queued
    assert await queue.queued("run-a") is True
    first, second = await queue.take(0, "c1", count=10, block_ms=10)
    await queue.ack(first)
    await queue.ack(first)  # acknowledged twice: counted once
    assert await queue.queued("run-a") is True
    await queue.ack(second)
    assert await queue.queued("run-a") is False
    # A deadline that fires queues its run too.
    await queue.schedule("run-b", int(time.time() * 1000) - 1)
    assert await queue.queued("run-b") is False
    assert (await queue.move_due(0))[0] == 1
    assert await queue.queued("run-b") is True
