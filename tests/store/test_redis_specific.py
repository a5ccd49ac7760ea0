"""What only the Redis store promises: one round trip, one slot per run, retention."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import pytest
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from builders import free_port
from phasegraph.errors import (
    JournalHeadError,
    LeaseHeldError,
    LeaseLostError,
    StoreError,
    StoreUnavailableError,
)
from phasegraph.store import Lease, open_store
from phasegraph.store.redis import RedisStore
from phasegraph.testing import isolated_redis_store, make_commit

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    direct = redis.asyncio.Redis.from_url(redis_url)
    yield direct
    await direct.aclose()


async def _commands_during(
    client: redis.asyncio.Redis, action: Awaitable[object]
) -> list[dict[str, str]]:
    """Every command the server ran while ``action`` (a coroutine) ran, via MONITOR."""
    marker = f"end-{uuid.uuid4().hex}"
    seen: list[dict[str, str]] = []
    async with client.monitor() as monitor:
        await action
        await client.echo(marker)
        while True:
            entry = await asyncio.wait_for(monitor.next_command(), timeout=5)
            if marker in entry["command"]:
                return seen
            seen.append({k: str(v) for k, v in entry.items()})


async def test_commit_is_one_evalsha_that_also_updates_the_index(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=600.0))  # connects, loads
    later = make_commit("r", 1, updated_at=661.5)  # the next minute: the entry moves
    seen = await _commands_during(client, store.commit(lease, later))
    sent = [c for c in seen if c["client_type"] != "lua" and store.prefix in c["command"]]
    assert [c["command"].split()[0] for c in sent] == ["EVALSHA"]
    ours = [c for c in seen if c["client_port"] == sent[0]["client_port"]]
    assert ours == sent
    # The run's writes and the index update happened inside the script.
    in_script = [c["command"].split()[0] for c in seen if c["client_type"] == "lua"]
    assert {"RPUSH", "HSET", "ZADD"} <= set(in_script)
    index_updates = [c for c in seen if c["command"].startswith(f"ZADD {store.prefix}:runs ")]
    assert len(index_updates) == 1
    assert await client.zscore(f"{store.prefix}:runs", "r") == 660.0  # the minute


async def test_a_commit_in_the_same_minute_leaves_the_index_entry_alone(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=600.0))
    seen = await _commands_during(
        client, store.commit(lease, make_commit("r", 1, updated_at=659.9))
    )
    in_script = [c["command"].split()[0] for c in seen if c["client_type"] == "lua"]
    assert {"RPUSH", "HSET"} <= set(in_script)
    assert "ZADD" not in in_script
    assert await client.zscore(f"{store.prefix}:runs", "r") == 600.0
    # Time going back moves it, so the score never exceeds the run's updated_at.
    await store.commit(lease, make_commit("r", 2, updated_at=599.0))
    assert await client.zscore(f"{store.prefix}:runs", "r") == 540.0


async def test_a_refused_commit_leaves_the_index_alone(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=100.0))
    stale = Lease(run_id="r", owner="w", token=lease.token - 1, expires_at=lease.expires_at)
    with pytest.raises(LeaseLostError):
        await store.commit(stale, make_commit("r", 1, updated_at=200.0))
    assert await client.zscore(f"{store.prefix}:runs", "r") == 60.0  # seq 0's minute


async def test_concurrent_commits_share_one_connection(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    leases = [await store.acquire(f"run{i}", "w", 30) for i in range(50)]
    await asyncio.gather(*(store.commit(lease, make_commit(lease.run_id, 0)) for lease in leases))

    async def commit_all() -> None:
        await asyncio.gather(
            *(store.commit(lease, make_commit(lease.run_id, 1)) for lease in leases)
        )

    seen = await _commands_during(client, commit_all())
    sent = [c for c in seen if c["client_type"] != "lua" and store.prefix in c["command"]]
    assert len(sent) == 50
    assert len({c["client_port"] for c in sent}) == 1
    heads = [(await store.read(lease.run_id)).meta.seq for lease in leases]
    assert heads == [1] * 50


async def test_commit_survives_a_flushed_script_cache(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0))
    await client.script_flush()
    await store.commit(lease, make_commit("r", 1))
    assert (await store.read("r")).meta.seq == 1


async def test_a_commit_after_a_dropped_connection_reconnects(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    name = f"pgtest-{uuid.uuid4().hex[:8]}"
    async with isolated_redis_store(redis_url, client_name=name) as store:
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        clients = await client.client_list()
        killed = [c["id"] for c in clients if c.get("name") == name]
        assert killed
        for client_id in killed:
            await client.client_kill_filter(_id=client_id)
        await store.commit(lease, make_commit("r", 1))
        assert (await store.read("r")).meta.seq == 1


async def test_a_commit_whose_reply_was_lost_is_retried_and_found_written(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0))
    # White-box: lose exactly one reply, after the script ran.
    wire = store._wire
    forward = wire.call_packed
    sent: list[str] = []

    async def lose_first_reply(command: bytes, key: str) -> Any:
        sent.append(command.split(b"\r\n")[2].decode())  # *<n>, $<len>, the name
        reply = await forward(command, key)
        if len(sent) == 1:
            raise ConnectionError("connection lost before the reply")
        return reply

    monkeypatch.setattr(wire, "call_packed", lose_first_reply)
    monkeypatch.setattr(wire, "request", lose_first_reply)  # a step's first try
    await store.commit(lease, make_commit("r", 1))
    assert sent == ["EVALSHA", "EVALSHA"]  # the retry found the step already written
    monkeypatch.undo()
    assert (await store.read("r")).meta.seq == 1
    assert [seq async for seq, _ in store.history("r")] == [0, 1]


async def test_a_refused_listing_read_is_a_store_error(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0))
    meta = store.run_keys("r")[0]
    await client.delete(meta)
    await client.set(meta, "not a hash")  # HMGET on it is refused (WRONGTYPE)
    with pytest.raises(StoreError, match="refused HMGET"):
        await store.list_runs()


async def test_all_keys_of_a_run_share_one_slot(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    for run_id in ("plain", "with:colons", "braces}{x"):
        lease = await store.acquire(run_id, "w", 30)
        await store.commit(lease, make_commit(run_id, 0))
        await store.commit(lease, make_commit(run_id, 1, snapshot=b"s1"))
        # SCAN may return a key more than once (while the keyspace rehashes): a set.
        keys = {k.decode() async for k in client.scan_iter(match=f"{store.prefix}:{{*")}
        run_keys = {k for k in keys if k.startswith(f"{store.prefix}:{{{run_id}}}:")}
        assert run_keys == set(store.run_keys(run_id))
        assert len({key_slot(k.encode()) for k in run_keys}) == 1
    assert await client.zcard(f"{store.prefix}:runs") == 3


async def test_retention_expires_finished_runs_only(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    async with isolated_redis_store(redis_url, ttl="60") as store:
        assert isinstance(store, RedisStore)
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0, status="running"))
        await store.commit(lease, make_commit("r", 1, status="waiting"))
        data_keys = store.run_keys("r")[:4] + store.run_keys("r")[5:]
        assert [await client.pttl(k) for k in data_keys] == [-1] * 5
        await store.commit(lease, make_commit("r", 2, status="parked"))
        assert [await client.pttl(k) for k in data_keys] == [-1] * 5
        await store.commit(lease, make_commit("r", 3, status="completed"))
        ttls = [await client.pttl(k) for k in data_keys]
        assert all(55_000 < ttl <= 60_000 for ttl in ttls), ttls
        assert 0 < await client.pttl(store.run_keys("r")[4]) <= 30_000  # lease keeps its own


async def test_retention_expires_a_finished_runs_inbox_with_it(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    async with isolated_redis_store(redis_url, ttl="60") as store:
        assert isinstance(store, RedisStore)
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0, status="waiting"))
        await store.post_message("r", "m1", b"hello", 1.0)
        await store.take_messages("r", 1)
        inbox = [f"{store.prefix}:{{r}}:{suffix}" for suffix in ("msgid", "msg", "msgtaken")]
        assert [await client.pttl(k) for k in inbox] == [-1] * 3
        await store.commit(lease, make_commit("r", 1, status="completed"))
        ttls = [await client.pttl(k) for k in inbox]
        assert all(55_000 < ttl <= 60_000 for ttl in ttls), ttls


async def test_without_ttl_finished_runs_are_kept(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, status="failed"))
    assert await client.pttl(store.run_keys("r")[0]) == -1


async def test_list_runs_trusts_meta_over_the_index(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    for run_id in ("kept", "expired"):
        lease = await store.acquire(run_id, "w", 30)
        await store.commit(lease, make_commit(run_id, 0, updated_at=time.time()))
    await client.delete(*store.run_keys("expired")[:4])  # as retention would
    await client.zadd(f"{store.prefix}:runs", {"never-committed": time.time() + 5})
    await client.zadd(f"{store.prefix}:runs", {"long-gone": 1.0})
    assert [m.run_id for m in await store.list_runs()] == ["kept"]
    # Old entries without meta are pruned; fresh ones are left (a commit may be landing).
    members = cast(list[bytes], await client.zrange(f"{store.prefix}:runs", 0, -1))
    left = {member.decode() for member in members}
    assert left == {"kept", "expired", "never-committed"}


async def test_concurrent_acquire_from_two_clients_has_one_winner(redis_url: str) -> None:
    async with (
        isolated_redis_store(redis_url) as first,
        open_store(f"{redis_url}?prefix={first.prefix}") as second,  # type: ignore[attr-defined]
    ):
        for i in range(20):
            run_id = f"race-{i}"
            results = await asyncio.gather(
                first.acquire(run_id, "one", 30),
                second.acquire(run_id, "two", 30),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in results) == ["Lease", "LeaseHeldError"]
            winner = next(r for r in results if isinstance(r, Lease))
            loser = next(r for r in results if isinstance(r, LeaseHeldError))
            assert repr(winner.owner) in str(loser)


async def test_unreachable_server_fails_fast_without_leaking_the_password(
    slept: list[float],
) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    async with open_store(url) as store:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.acquire("r", "w", 30)
        assert slept == []  # failed at once: an acquire may have run, it is not retried
        assert "127.0.0.1" in str(caught.value)
        assert "hunter2" not in str(caught.value)
        with pytest.raises(StoreUnavailableError):
            await store.read("r")
        lease = Lease(run_id="r", owner="w", token=1, expires_at=time.time() + 30)
        slept.clear()
        with pytest.raises(StoreUnavailableError, match=r":\*\*\*@127\.0\.0\.1"):
            await store.commit(lease, make_commit("r", 0))
        assert 1.0 < sum(slept) < 4.0  # retried, boundedly


async def test_a_commit_onto_a_head_moved_back_is_refused_and_writes_nothing(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    """The commit script refuses a step when the records do not end at the head (the head
    was moved back outside phasegraph): nothing is appended after the stored records."""
    lease = await store.acquire("r", "w", 30)
    for seq in range(3):
        await store.commit(lease, make_commit("r", seq))
    meta, records = store.run_keys("r")[:2]
    await cast("Awaitable[int]", client.hset(meta, "seq", 1))
    with pytest.raises(
        JournalHeadError, match="its head is seq 1 but its journal goes on to seq 2"
    ):
        await store.commit(lease, make_commit("r", 2, record=b"other"))
    assert await cast("Awaitable[int]", client.llen(records)) == 3
    assert await cast("Awaitable[Any]", client.hget(meta, "seq")) == b"1"


@settings(max_examples=10)
@given(
    times=st.lists(st.integers(min_value=0, max_value=3000), min_size=60, max_size=150),
    exact=st.sets(st.integers(min_value=0, max_value=149), max_size=20),
    offset=st.integers(min_value=0, max_value=100),
    limit=st.integers(min_value=1, max_value=80),
)
def test_listing_follows_update_time_across_index_pages(
    redis_url: str, times: list[int], exact: set[int], offset: int, limit: int
) -> None:
    """Index scores are cut to the minute (or exact, as older versions wrote them); pages
    of the listing still follow ``updated_at``, then run id, across the index's pages."""

    async def check() -> None:
        async with isolated_redis_store(redis_url) as store:
            assert isinstance(store, RedisStore)
            for index, tenths in enumerate(times):
                run_id = f"run-{index:03d}"
                lease = await store.acquire(run_id, "w", 30)
                updated_at = 1000.0 + tenths / 10  # many runs share a minute
                await store.commit(lease, make_commit(run_id, 0, updated_at=updated_at))
                if index in exact:  # as a version before minutes left it
                    await store._call("ZADD", f"{store.prefix}:runs", updated_at, run_id)
            expected = sorted(range(len(times)), key=lambda i: (-times[i], i))
            listed = await store.list_runs(limit=limit, offset=offset)
            want = [f"run-{i:03d}" for i in expected[offset : offset + limit]]
            assert [meta.run_id for meta in listed] == want

    asyncio.run(check())


async def test_a_step_that_moves_only_the_head_sends_three_arguments(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=600.0))
    seen = await _commands_during(
        client, store.commit(lease, make_commit("r", 1, updated_at=601.0, record=b"rec"))
    )
    (sent,) = [c for c in seen if c["command"].startswith("EVALSHA")]
    # EVALSHA, digest, one key, then lease value, seq and time (two doubles), record
    # (MONITOR shows the packed bytes escaped: these two hold no space)
    words = sent["command"].split()
    assert len(words) == 7
    assert (words[2:5], words[6]) == (["1", store.run_keys("r")[0], f"{lease.token}:w"], "rec")
    stored = await client.hgetall(store.run_keys("r")[0])
    assert stored[b"seq"] == b"1"
    assert float(stored[b"updated_at"]) == 601.0
    assert stored[b"graph"] == b"g"
    assert stored[b"status"] == b"running"


async def test_quiet_steps_of_every_record_size_store_the_record_whole(
    store: RedisStore,
) -> None:
    """Records around the largest size whose length line is made ahead, and far past it."""
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0, updated_at=600.0))
    sizes = [0, 1, 9, 10, 2046, 2047, 2048, 2049, 70_000]
    records = [bytes([65 + seq % 26]) * size for seq, size in enumerate(sizes, start=1)]
    for seq, record in enumerate(records, start=1):
        await store.commit(lease, make_commit("r", seq, updated_at=600.0 + seq, record=record))
    stored = await store.history_list("r", start=1)
    assert stored == list(enumerate(records, start=1))


async def test_a_new_status_and_a_snapshot_reach_the_run_after_quiet_steps(
    store: RedisStore,
) -> None:
    lease = await store.acquire("r", "w", 30)
    for seq in range(3):
        await store.commit(lease, make_commit("r", seq))
    await store.commit(lease, make_commit("r", 3, snapshot=b"s3", status="waiting"))
    read = await store.read("r")
    assert (read.meta.status, read.meta.seq, read.snapshot_seq, read.snapshot) == (
        "waiting",
        3,
        3,
        b"s3",
    )


async def test_a_commit_after_the_lease_key_expired_takes_the_lease_again(
    store: RedisStore, client: redis.asyncio.Redis
) -> None:
    """Nobody took the run while its lease key was gone: the commit sets it again."""
    lease = await store.acquire("r", "w", 30)
    await store.commit(lease, make_commit("r", 0))
    await store.commit(lease, make_commit("r", 1))
    lease_key = store.run_keys("r")[4]
    await client.delete(lease_key)  # as its expiry would
    await store.commit(lease, make_commit("r", 2))
    assert await client.get(lease_key) == f"{lease.token}:w".encode()
    assert 0 < await client.pttl(lease_key) <= 30_000
    assert (await store.read("r")).meta.seq == 2


async def test_a_lease_taken_over_between_two_steps_fences_the_next_one(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    async with (
        isolated_redis_store(redis_url) as first,
        open_store(f"{redis_url}?prefix={first.prefix}") as second,  # type: ignore[attr-defined]
    ):
        lease = await first.acquire("r", "one", 30)
        await first.commit(lease, make_commit("r", 0))
        await first.commit(lease, make_commit("r", 1))
        await client.delete(first.run_keys("r")[4])  # expired
        taken = await second.acquire("r", "two", 30)
        with pytest.raises(LeaseLostError, match="'two'"):
            await first.commit(lease, make_commit("r", 2))
        await second.commit(taken, make_commit("r", 2, status="completed"))
        read = await first.read("r")
        assert (read.meta.seq, read.meta.status) == (2, "completed")
        assert [s async for s, _ in first.history("r")] == [0, 1, 2]


async def test_a_run_another_store_committed_is_continued_with_its_meta_kept(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    """A store that did not write a run's last step sends all of its meta again."""
    async with (
        isolated_redis_store(redis_url) as first,
        open_store(f"{redis_url}?prefix={first.prefix}") as second,  # type: ignore[attr-defined]
    ):
        lease = await first.acquire("r", "one", 30)
        for seq in range(3):
            await first.commit(lease, make_commit("r", seq))
        await first.release(lease)
        await client.hset(first.run_keys("r")[0], "status", "edited")  # then overwritten
        again = await second.acquire("r", "two", 30)
        await second.commit(again, make_commit("r", 3))
        read = await second.read("r")
        assert (read.meta.graph, read.meta.status, read.meta.seq) == ("g", "running", 3)
