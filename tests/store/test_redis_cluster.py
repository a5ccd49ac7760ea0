"""The Redis store on a Redis Cluster of three primaries (real servers, on loopback)."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from builders import free_port
from phasegraph.errors import LeaseLostError, SequenceConflictError, StoreUnavailableError
from phasegraph.store import Lease, open_store
from phasegraph.store._redis_cluster import ClusterLink
from phasegraph.store._redis_queue import RunQueue
from phasegraph.store._redis_scripts import COMMIT
from phasegraph.store.redis import RedisStore
from phasegraph.testing import isolated_redis_store, make_commit

pytestmark = pytest.mark.redis


@pytest.fixture
async def store(redis_cluster_url: str) -> AsyncIterator[RedisStore]:
    async with isolated_redis_store(redis_cluster_url) as opened:
        assert isinstance(opened, RedisStore)
        yield opened


@pytest.fixture
async def client(store: RedisStore) -> AsyncIterator[RedisCluster]:
    direct = store.queue_client()
    assert isinstance(direct, RedisCluster)
    await direct.initialize()  # learn the nodes now
    yield direct
    await direct.aclose()


async def _keys_by_node(client: RedisCluster, prefix: str) -> dict[str, set[str]]:
    """Every key under ``prefix``, by the primary that holds it (asked one node at a time)."""
    found: dict[str, set[str]] = {}
    for node in client.get_primaries():
        direct = redis.asyncio.Redis(host=node.host, port=node.port)
        try:
            keys = {k.decode() async for k in direct.scan_iter(match=f"{prefix}:*", count=1000)}
        finally:
            await direct.aclose()
        found[node.name] = keys
    return found


async def test_runs_spread_over_all_three_primaries(
    store: RedisStore, client: RedisCluster
) -> None:
    run_ids = [f"run-{i}" for i in range(50)]
    for run_id in run_ids:
        lease = await store.acquire(run_id, "w", 30)
        await store.commit(lease, make_commit(run_id, 0))
        await store.commit(lease, make_commit(run_id, 1, snapshot=b"s1"))
    by_node = await _keys_by_node(client, store.prefix)
    for run_id in run_ids:
        keys = set(store.run_keys(run_id))
        (node,) = [name for name, held in by_node.items() if keys & held]
        assert keys <= by_node[node]  # every key of a run on one node
    nodes_with_runs = {
        name for name, keys in by_node.items() if any(k.endswith(":meta") for k in keys)
    }
    assert len(nodes_with_runs) == 3
    index = f"{store.prefix}:runs"
    assert sum(index in keys for keys in by_node.values()) == 1
    listed = await store.list_runs(limit=100)
    assert sorted(m.run_id for m in listed) == sorted(run_ids)
    assert all(m.seq == 1 for m in listed)
    assert [(await store.read(r)).snapshot for r in run_ids[:3]] == [b"s1"] * 3


async def test_a_commit_with_a_stale_fencing_token_is_refused(
    store: RedisStore, client: RedisCluster
) -> None:
    old = await store.acquire("r", "w1", 30)
    await store.commit(old, make_commit("r", 0, updated_at=100.0))
    old = await store.renew(old, 0.05)
    await asyncio.sleep(0.1)
    new = await store.acquire("r", "w2", 30)
    assert new.token > old.token
    with pytest.raises(LeaseLostError, match=r"'r'.*'w2'"):
        await store.commit(old, make_commit("r", 1, updated_at=200.0))
    stale = Lease(run_id="r", owner="w2", token=new.token - 1, expires_at=new.expires_at)
    with pytest.raises(LeaseLostError):
        await store.commit(stale, make_commit("r", 1, updated_at=200.0))
    # Refused: neither the run nor its index entry moved.
    assert (await store.read("r")).meta.seq == 0
    assert await client.zscore(f"{store.prefix}:runs", "r") == 100.0
    await store.commit(new, make_commit("r", 1, updated_at=300.0))
    assert (await store.read("r")).meta.seq == 1
    assert await client.zscore(f"{store.prefix}:runs", "r") == 300.0


async def test_a_run_is_listed_before_its_first_commit_lands(
    store: RedisStore, client: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = store._link  # white-box: look at the index as the commit script is sent
    assert isinstance(link, ClusterLink)
    forward = link.eval
    listed_when_sent: list[float | None] = []

    async def script(name: str, keys: Any, args: Any) -> Any:
        if name == COMMIT:
            listed_when_sent.append(await client.zscore(f"{store.prefix}:runs", "r"))
        return await forward(name, keys, args)

    monkeypatch.setattr(link, "eval", script)
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=100.0))
    await store.commit(lease, make_commit("r", 1, updated_at=200.0))
    # Before seq 0 the entry was there already (a crash right after the commit cannot
    # leave the run unlisted); every commit then set its score.
    assert listed_when_sent == [100.0, 100.0]
    assert await client.zscore(f"{store.prefix}:runs", "r") == 200.0


async def test_a_refused_first_commit_never_moves_a_listed_run(
    store: RedisStore, client: RedisCluster
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=100.0))
    await store.commit(lease, make_commit("r", 1, updated_at=150.0))
    with pytest.raises(SequenceConflictError):
        await store.commit(lease, make_commit("r", 0, record=b"other", updated_at=200.0))
    assert await client.zscore(f"{store.prefix}:runs", "r") == 150.0


async def test_commits_go_on_after_every_node_forgot_the_scripts(
    store: RedisStore, client: RedisCluster
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0))
    for node in client.get_primaries():
        direct = redis.asyncio.Redis(host=node.host, port=node.port)
        try:
            await direct.script_flush()
        finally:
            await direct.aclose()
    await store.commit(lease, make_commit("r", 1))
    lease = await store.renew(lease, 30)
    assert (await store.read("r")).meta.seq == 1


async def test_the_work_queue_spreads_its_partitions_over_the_cluster(
    redis_cluster_url: str,
) -> None:
    async with isolated_redis_store(redis_cluster_url) as opened:
        assert isinstance(opened, RedisStore)
        queue = opened.work_queue(partitions=3)
        try:
            run_ids = [f"run-{i}" for i in range(30)]
            for run_id in run_ids[:15]:
                await queue.enqueue(run_id)
            for run_id in run_ids[15:]:
                await queue.schedule(run_id, 1)  # long due
            taken: list[str] = []
            for partition in range(3):
                moved, _ = await queue.move_due(partition)
                entries = await queue.take(partition, "c", 100, 10)
                assert moved <= len(entries)
                for entry in entries:
                    await queue.ack(entry)
                taken += [entry.run_id for entry in entries]
                assert await queue.pending(partition) == 0
                await queue.trim(partition)
            assert sorted(taken) == sorted(run_ids)
            assert await _partition_nodes(opened, queue) == 3
        finally:
            await queue.aclose()


async def _partition_nodes(store: RedisStore, queue: RunQueue) -> int:
    """How many primaries serve the partitions' streams (as the cluster says)."""
    client = store.queue_client()
    assert isinstance(client, RedisCluster)
    try:
        await client.initialize()
        count = await queue.partitions()
        return len({client.get_node_from_key(queue.work_key(p)).name for p in range(count)})
    finally:
        await client.aclose()


async def test_an_unreachable_cluster_is_one_clear_error(slept: list[float]) -> None:
    url = f"redis+cluster://:hunter2@127.0.0.1:{free_port()}/0"
    async with open_store(url) as store:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.acquire("r", "w", 30)
        assert slept == []  # failed at once: an acquire may have run, it is not retried
        message = str(caught.value)
        assert "redis+cluster://:***@127.0.0.1" in message
        assert "hunter2" not in message
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
            await store.list_runs()
        lease = Lease(run_id="r", owner="w", token=1, expires_at=time.time() + 30)
        slept.clear()
        with pytest.raises(StoreUnavailableError, match=r":\*\*\*@127\.0\.0\.1"):
            await store.commit(lease, make_commit("r", 0))
        assert 1.0 < sum(slept) < 4.0  # retried, boundedly


async def test_a_server_without_cluster_mode_is_named_as_such(redis_url: str) -> None:
    url = redis_url.replace("redis://", "redis+cluster://", 1)
    async with open_store(f"{url}?prefix=pgtest{uuid.uuid4().hex[:8]}") as store:
        with pytest.raises(StoreUnavailableError, match=r"[Cc]luster mode is not enabled"):
            await store.acquire("r", "w", 30)
