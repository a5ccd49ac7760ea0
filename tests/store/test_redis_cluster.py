"""The Redis store on a Redis Cluster of three primaries (real servers, on loopback)."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.cluster import ClusterNode, RedisCluster

from builders import free_port
from phasegraph.errors import LeaseLostError, SequenceConflictError, StoreUnavailableError
from phasegraph.store import Lease, open_store
from phasegraph.store._redis_scripts import COMMIT
from phasegraph.store._redis_wire import key_slot
from phasegraph.store.redis import RedisStore, RunQueue
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
    forward = store._run_script  # white-box: look at the index as the commit script is sent
    listed_when_sent: list[float | None] = []

    async def script(name: str, command: bytes, route: str) -> Any:
        if name == COMMIT:
            listed_when_sent.append(await client.zscore(f"{store.prefix}:runs", "r"))
        return await forward(name, command, route)

    monkeypatch.setattr(store, "_run_script", script)
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


async def test_key_slots_are_the_clusters(client: RedisCluster) -> None:
    keys = ["foo", "pg:{run-1}:meta", "{run-1}", "a{}b", "a{{b}}", "x{y", "ünï{çødé}"]
    (node,) = client.get_primaries()[:1]
    direct = redis.asyncio.Redis(host=node.host, port=node.port)
    try:
        assert [key_slot(k) for k in keys] == [
            await direct.execute_command("CLUSTER", "KEYSLOT", k) for k in keys
        ]
    finally:
        await direct.aclose()


async def test_commands_follow_a_slot_while_it_moves_and_after(
    store: RedisStore, client: RedisCluster
) -> None:
    lease = await store.acquire("moving", "w", 30)
    await store.commit(lease, make_commit("moving", 0))
    keys = store.run_keys("moving")
    slot = key_slot(keys[0])
    source = client.get_node_from_key(keys[0])
    (target, *_) = [node for node in client.get_primaries() if node.name != source.name]

    async def half_moved(src: redis.asyncio.Redis, dst: ClusterNode) -> None:
        # The lease key is on the target already, the rest still on the source: the
        # source answers ASK for it, and the store reads it from the target.
        await src.execute_command("MIGRATE", dst.host, dst.port, keys[4], 0, 5000)
        assert await store.holder("moving") == "w"

    await _move_slot(client, slot, source, target, midway=half_moved)
    try:
        # The store still maps the slot to the source, which answers MOVED.
        await store.commit(lease, make_commit("moving", 1, snapshot=b"s1"))
        lease = await store.renew(lease, 30)
        await store.commit(lease, make_commit("moving", 2))
        found = await store.read("moving")
        assert (found.meta.seq, found.snapshot) == (2, b"s1")
        assert await _keys_of(target, keys) == len(keys)
    finally:
        await _move_slot(client, slot, target, source)  # as the other tests expect
    assert (await store.read("moving")).meta.seq == 2


async def _move_slot(
    client: RedisCluster,
    slot: int,
    source: ClusterNode,
    target: ClusterNode,
    midway: Callable[[redis.asyncio.Redis, ClusterNode], Awaitable[None]] | None = None,
) -> None:
    """Move a hash slot and its keys from ``source`` to ``target``, as resharding does."""
    src = redis.asyncio.Redis(host=source.host, port=source.port)
    dst = redis.asyncio.Redis(host=target.host, port=target.port)
    try:
        src_id = (await src.execute_command("CLUSTER", "MYID")).decode()
        dst_id = (await dst.execute_command("CLUSTER", "MYID")).decode()
        await dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        await src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        if midway is not None:
            await midway(src, target)
        while keys := await src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            await src.execute_command(
                "MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys
            )
        for node in (target, source, *client.get_primaries()):
            direct = redis.asyncio.Redis(host=node.host, port=node.port)
            try:
                await direct.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            finally:
                await direct.aclose()
    finally:
        await src.aclose()
        await dst.aclose()


async def _keys_of(node: ClusterNode, keys: tuple[str, ...]) -> int:
    """How many of ``keys`` ``node`` holds."""
    direct = redis.asyncio.Redis(host=node.host, port=node.port)
    try:
        return int(await direct.exists(*keys))
    finally:
        await direct.aclose()


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
