"""The work queue of the worker processes: Redis Streams with one consumer group.

A run that needs driving — created with ``--detach``, answered, resumed, or whose gate
deadline passed — is an entry ``{run: <run id>}`` in a stream. Workers read entries
through the consumer group ``workers`` (``XREADGROUP``) and acknowledge one (``XACK``)
only once the run is idle again (finished, waiting or parked) and its lease given back,
so an entry a worker took is never lost: while it drives the run it keeps the entry's
idle time short (``XCLAIM ... JUSTID`` is its heartbeat), and when it dies the entry ages
until another worker reclaims it (``XAUTOCLAIM``). Who may commit is still decided by the
run's lease and fencing token, inside the commit script: a reclaimed entry whose old
worker is merely slow finds the lease held and is retried later, never committed twice.

Deadlines of waiting and parked runs live in a sorted set scored by the time they fall
due (ms since the epoch); a run waiting there holds no worker, no task and no memory
anywhere but its keys. Any live worker moves due runs into the stream with one script
that reads the server's clock, so whichever worker is alive fires a deadline.

Keys (``P`` is the store's prefix): the stream ``P:{q<i>}:work``, the deadlines
``P:{q<i>}:due`` and the count of each run's unfinished entries ``P:{q<i>}:queued`` (a
hash, so ``phasegraph status`` can tell a queued run from an abandoned one) of each
partition ``i`` share a hash tag, so one script may touch them all on a Redis Cluster.
Replies and cancel requests for a run a worker is driving wait in the run's own hash
slot, ``P:{<run>}:inbox`` (a list of JSON replies) and ``P:{<run>}:cancel`` (JSON: the
reason and who asked; plain text, the reason alone, from earlier versions), and an entry
in the stream wakes that worker up.

A run belongs to partition ``crc32(run_id) % partitions``. The number of partitions is
fixed when the first client writes ``P:{q}:partitions`` and read from there by every
later one, so submitters and workers always agree.

This module speaks to Redis through a redis-py asyncio client (a plain or a cluster
client): the queue costs a few commands per *drive*, not per step, so it does not need
the store's own wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from phasegraph.errors import InputError, StoreError, StoreUnavailableError

__all__ = ["GROUP", "QueueEntry", "RunQueue"]

GROUP: Final = "workers"
"""The consumer group every worker reads through."""
_INBOX_BATCH: Final = 100  # replies applied per look at a run's inbox

# KEYS: work, queued. ARGV: run. Adds an entry for the run and counts it as queued, in
# one step, so the count never misses an entry.
_ENQUEUE: Final = """
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return redis.call('XADD', KEYS[1], '*', 'run', ARGV[1])
"""

# KEYS: work, queued. ARGV: group, entry id, run. Acknowledges the entry and uncounts it
# (only the first acknowledgement of an entry counts).
_ACK: Final = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 and redis.call('HINCRBY', KEYS[2], ARGV[3], -1) <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[3])
end
return acked
"""

# KEYS: due, work, queued. ARGV: how many at most. Moves the runs whose deadline passed
# (by the server's clock) into the stream, counted as queued; returns how many moved and
# the next deadline's score (or -1). Atomic, so two workers never both move one deadline.
_MOVE_DUE: Final = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[1]))
for _, run in ipairs(due) do
  redis.call('ZREM', KEYS[1], run)
  redis.call('HINCRBY', KEYS[3], run, 1)
  redis.call('XADD', KEYS[2], '*', 'run', run)
end
local next = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, next[2] or -1, ms}
"""

# KEYS: work. ARGV: group. Trims entries every consumer is done with: those before the
# oldest pending entry, or up to the last delivered one when none is pending (a pending
# entry is never trimmed, so a dead worker's work is still there to reclaim; an entry not
# yet delivered neither).
_TRIM: Final = """
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then return 0 end
local floor = nil
for _, group in ipairs(groups) do
  local fields = {}
  for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
  if fields['name'] == ARGV[1] then floor = fields['last-delivered-id'] end
end
if not floor then return 0 end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
if pending[2] then
  floor = pending[2]
else
  -- Nothing pending: the last delivered entry is done too (MINID keeps what it names).
  local ms, seq = string.match(floor, '^(%d+)-(%d+)$')
  floor = ms .. '-' .. (tonumber(seq) + 1)
end
return redis.call('XTRIM', KEYS[1], 'MINID', floor)
"""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One piece of run work taken from the stream.

    Attributes:
        partition: The partition whose stream holds it.
        entry_id: The stream entry's id (what ``XACK`` and the heartbeat name).
        run_id: The run to drive.
        deliveries: How many times the entry was handed out (1 the first time).
    """

    partition: int
    entry_id: bytes
    run_id: str
    deliveries: int = 1


@final
class RunQueue:
    """The run work queue on one Redis server or cluster.

    Args:
        client: A redis-py asyncio client (``decode_responses=False``); closed by
            :meth:`aclose`.
        prefix: The store's key prefix.
        where: The server, as messages name it (a URL without its password).
        partitions: How many streams to spread runs over, used only if none is recorded
            yet (the first client decides for every later one).
    """

    def __init__(self, client: Any, *, prefix: str, where: str, partitions: int = 1) -> None:
        if partitions < 1:
            raise InputError(f"partitions must be at least 1, not {partitions}")
        self._client = _Translated(client, where)
        self._prefix = prefix
        self._wanted = partitions
        self._count: int | None = None
        self._count_key = f"{prefix}:{{q}}:partitions"
        self._counting = asyncio.Lock()  # many first enqueues at once: read the count once
        self._groups: set[int] = set()

    # -- layout -------------------------------------------------------------------------

    async def partitions(self) -> int:
        """The number of partitions (recorded by the first client to ask)."""
        if self._count is not None:
            return self._count
        async with self._counting:
            if self._count is not None:  # read by the coroutine that held the lock first
                return self._count
            await self._client.set(self._count_key, self._wanted, nx=True)
            count = await self._recorded_partitions()
        if count is None:  # deleted between the two commands
            raise StoreError(f"the queue's partition count at {self._count_key!r} vanished")
        return count

    async def _recorded_partitions(self) -> int | None:
        """The recorded number of partitions; None while no client has recorded one."""
        if self._count is None:
            found = await self._client.get(self._count_key)
            if found is None:
                return None
            try:
                self._count = int(found)
            except ValueError:
                raise StoreError(
                    f"the queue's partition count at {self._count_key!r} is {found!r}"
                ) from None
        return self._count

    def work_key(self, partition: int) -> str:
        """The stream of one partition."""
        return f"{self._prefix}:{{q{partition}}}:work"

    def due_key(self, partition: int) -> str:
        """The deadlines of one partition's runs."""
        return f"{self._prefix}:{{q{partition}}}:due"

    async def partition_of(self, run_id: str) -> int:
        """The partition a run's work goes to."""
        return _partition(run_id, await self.partitions())

    # -- submitting -----------------------------------------------------------------------

    def queued_key(self, partition: int) -> str:
        """How many unacknowledged entries each run of a partition has (a hash)."""
        return f"{self._prefix}:{{q{partition}}}:queued"

    async def enqueue(self, run_id: str) -> None:
        """Ask for the run to be driven by some worker (a new run, a reply, a resume)."""
        partition = await self.partition_of(run_id)
        keys = (self.work_key(partition), self.queued_key(partition))
        await self._client.eval(_ENQUEUE, 2, *keys, run_id)

    async def queued(self, run_id: str) -> bool:
        """Whether the run has an entry no worker has finished (taken or not yet).

        Only reads: where no queue was ever used, no partition count is recorded here.
        """
        count = await self._recorded_partitions()
        if count is None:
            return False
        partition = _partition(run_id, count)
        return bool(await self._client.hexists(self.queued_key(partition), run_id))

    # -- mail for runs a worker is driving --------------------------------------------

    def _run_key(self, run_id: str, name: str) -> str:
        return f"{self._prefix}:{{{run_id}}}:{name}"  # the run's hash slot, as its keys

    async def post_reply(self, run_id: str, reply: Mapping[str, Any]) -> None:
        """Hand a reply to whichever worker drives the run (applied between two steps)."""
        await self._client.rpush(self._run_key(run_id, "inbox"), json.dumps(dict(reply)))
        await self.enqueue(run_id)  # the wake-up: its worker looks at the inbox

    async def replies(self, run_id: str) -> list[dict[str, Any]]:
        """The replies posted to the run, oldest first (kept until :meth:`replies_done`)."""
        raw = await self._client.lrange(self._run_key(run_id, "inbox"), 0, _INBOX_BATCH - 1)
        return [json.loads(item) for item in raw]

    async def replies_done(self, run_id: str, count: int) -> None:
        """Forget the first ``count`` replies (applied, or refused and logged)."""
        await self._client.ltrim(self._run_key(run_id, "inbox"), count, -1)

    async def request_cancel(
        self, run_id: str, reason: str, *, actor: Mapping[str, Any] | None = None
    ) -> None:
        """Ask whichever worker drives the run to stop it and commit it as cancelled.

        ``actor`` (who asks: ``name`` and ``groups``) is kept beside the reason.
        """
        request = {"reason": reason, "actor": None if actor is None else dict(actor)}
        await self._client.set(self._run_key(run_id, "cancel"), json.dumps(request))
        await self.enqueue(run_id)

    async def cancel_requested(self, run_id: str) -> dict[str, Any] | None:
        """A pending cancel request (``reason`` and ``actor``), if there is one."""
        found = await self._client.get(self._run_key(run_id, "cancel"))
        if found is None:
            return None
        text = bytes(found).decode(errors="replace")
        with contextlib.suppress(ValueError):
            request = json.loads(text)
            if isinstance(request, dict) and isinstance(request.get("reason"), str):
                return {"reason": request["reason"], "actor": request.get("actor")}
        # Written by an earlier phasegraph: the reason alone, as plain text.
        return {"reason": text, "actor": None}

    async def cancel_done(self, run_id: str) -> None:
        """The run is cancelled (or had finished): drop the request."""
        await self._client.delete(self._run_key(run_id, "cancel"))

    async def schedule(self, run_id: str, due_ms: int) -> None:
        """Have the run driven once ``due_ms`` (ms since the epoch) has passed.

        A run has one deadline in the set: the earliest its driver last saw.
        """
        partition = await self.partition_of(run_id)
        await self._client.zadd(self.due_key(partition), {run_id: due_ms})

    async def unschedule(self, run_id: str) -> None:
        """Forget the run's deadline (it finished, or a reply is driving it on)."""
        partition = await self.partition_of(run_id)
        await self._client.zrem(self.due_key(partition), run_id)

    async def deadline(self, run_id: str) -> int | None:
        """The run's recorded deadline in ms since the epoch, if it has one."""
        partition = await self.partition_of(run_id)
        score = await self._client.zscore(self.due_key(partition), run_id)
        return None if score is None else int(score)

    # -- consuming ------------------------------------------------------------------------

    async def join(self, partition: int) -> None:
        """Create the consumer group of a partition's stream if it does not exist."""
        if partition in self._groups:
            return
        try:
            await self._client.xgroup_create(self.work_key(partition), GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(partition)

    async def take(
        self, partition: int, consumer: str, count: int, block_ms: int
    ) -> list[QueueEntry]:
        """New entries for ``consumer`` (at most ``count``; waits up to ``block_ms``)."""
        await self.join(partition)
        key = self.work_key(partition)
        try:
            reply = await self._client.xreadgroup(
                GROUP, consumer, {key: ">"}, count=count, block=block_ms
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard(partition)  # the stream was deleted: make it again
            return []
        entries: list[QueueEntry] = []
        for _, items in _stream_items(reply):
            entries += [_entry(partition, entry_id, fields) for entry_id, fields in items]
        return entries

    async def reclaim(
        self, partition: int, consumer: str, idle_ms: int, count: int
    ) -> list[QueueEntry]:
        """Take over entries idle for ``idle_ms`` or more (their worker died or gave up)."""
        await self.join(partition)
        key = self.work_key(partition)
        reply = await self._client.xautoclaim(
            key, GROUP, consumer, idle_ms, start_id="0-0", count=count
        )
        items = reply[1] if len(reply) > 1 else []
        claimed = [_entry(partition, entry_id, fields) for entry_id, fields in items if fields]
        if not claimed:
            return []
        # How often each was handed out, to tell a poison entry from a dead worker's.
        counts = await self._client.xpending_range(
            key, GROUP, min=claimed[0].entry_id, max=claimed[-1].entry_id, count=len(claimed)
        )
        times = {item["message_id"]: int(item["times_delivered"]) for item in counts}
        return [
            QueueEntry(e.partition, e.entry_id, e.run_id, times.get(e.entry_id, 1)) for e in claimed
        ]

    async def stale(
        self, partition: int, consumer: str, idle_ms: int, count: int
    ) -> list[QueueEntry]:
        """Other consumers' entries idle for ``idle_ms`` or more (oldest first), unclaimed.

        A worker asks which runs they are for, and claims (:meth:`claim`) those whose
        lease is free: a dead worker's runs move as soon as its lease allows.
        """
        await self.join(partition)
        key = self.work_key(partition)
        items = await self._client.xpending_range(
            key, GROUP, min="-", max="+", count=count, idle=idle_ms
        )
        entries: list[QueueEntry] = []
        for item in items:
            if item["consumer"] == consumer.encode():
                continue  # its own: being driven here
            found = await self._client.xrange(key, min=item["message_id"], max=item["message_id"])
            for entry_id, fields in found:
                times = int(item["times_delivered"])
                entries.append(
                    QueueEntry(partition, entry_id, _entry(0, b"", fields).run_id, times)
                )
        return entries

    async def claim(
        self, consumer: str, idle_ms: int, entries: Sequence[QueueEntry]
    ) -> list[QueueEntry]:
        """Take over ``entries`` still idle for ``idle_ms`` (a heartbeat since keeps one)."""
        claimed: list[QueueEntry] = []
        for entry in entries:
            key = self.work_key(entry.partition)
            ids = await self._client.xclaim(
                key, GROUP, consumer, idle_ms, [entry.entry_id], justid=True
            )
            if ids:
                claimed.append(
                    QueueEntry(entry.partition, entry.entry_id, entry.run_id, entry.deliveries + 1)
                )
        return claimed

    async def touch(self, consumer: str, entries: Sequence[QueueEntry]) -> None:
        """Reset the idle time of entries ``consumer`` is working on (its heartbeat)."""
        by_partition: dict[int, list[bytes]] = {}
        for entry in entries:
            by_partition.setdefault(entry.partition, []).append(entry.entry_id)
        for partition, ids in by_partition.items():
            await self._client.xclaim(
                self.work_key(partition), GROUP, consumer, 0, ids, justid=True
            )

    async def ack(self, entry: QueueEntry) -> None:
        """The entry's work is done: nobody needs to take it again."""
        keys = (self.work_key(entry.partition), self.queued_key(entry.partition))
        await self._client.eval(_ACK, 2, *keys, GROUP, entry.entry_id, entry.run_id)

    async def move_due(self, partition: int, limit: int = 500) -> tuple[int, float | None]:
        """Move runs whose deadline passed into the stream.

        Returns:
            How many moved, and seconds until the next deadline (None: there is none).
        """
        keys = (self.due_key(partition), self.work_key(partition), self.queued_key(partition))
        moved, next_ms, now_ms = await self._client.eval(_MOVE_DUE, 3, *keys, limit)
        following = float(next_ms)
        return int(moved), None if following < 0 else max(following - int(now_ms), 0) / 1000

    async def trim(self, partition: int) -> int:
        """Drop entries every worker is done with; returns how many went."""
        return int(await self._client.eval(_TRIM, 1, self.work_key(partition), GROUP))

    async def pending(self, partition: int) -> int:
        """How many entries are taken but not acknowledged."""
        summary = await self._client.xpending(self.work_key(partition), GROUP)
        return int(summary["pending"])

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._client.aclose()


_HANDLED_HERE: Final = frozenset({"xgroup_create", "xreadgroup"})
# Commands whose repeat would change the outcome if the first try was carried out after
# all (a reply posted twice, replies dropped twice): never sent again after a failure.
_ONCE: Final = frozenset({"rpush", "ltrim"})


class _Translated:
    """The client, its errors turned into the store's: one line for a person, no traceback.

    Every queue call is a redis-py coroutine; a connection that cannot be had is
    :class:`StoreUnavailableError` (the caller may retry), a refused command
    :class:`StoreError`.

    A call that fails for its connection is sent once more (but those of :data:`_ONCE`):
    after a Redis restart the pool still holds connections the old server closed, and
    the first use of each fails although the server answers. redis-py drops the failed
    connection and hands the same one out next, connected afresh; where the server is
    really away, the second try fails as fast as the first.
    """

    __slots__ = ("_client", "_where")

    def __init__(self, client: Any, where: str) -> None:
        self._client = client
        self._where = where

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                try:
                    return await method(*args, **kwargs)
                except RedisConnectionError:
                    if name in _ONCE:
                        raise
                return await method(*args, **kwargs)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                raise StoreUnavailableError(f"cannot reach Redis at {self._where}: {exc}") from None
            except ResponseError as exc:
                if name in _HANDLED_HERE:
                    raise  # the queue's own handling (BUSYGROUP, NOGROUP) looks at these
                raise StoreError(f"Redis at {self._where} refused {name}: {exc}") from None
            except (RedisError, RedisClusterException) as exc:
                raise StoreError(f"Redis at {self._where} refused {name}: {exc}") from None

        return call


def _partition(run_id: str, count: int) -> int:
    return zlib.crc32(run_id.encode()) % count


def _stream_items(reply: Any) -> list[tuple[Any, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """``XREADGROUP``'s reply (RESP2: a list of [stream, entries]) as pairs."""
    return [(key, items) for key, items in reply or ()]


def _entry(partition: int, entry_id: bytes, fields: dict[bytes, bytes]) -> QueueEntry:
    run = fields.get(b"run", b"")
    return QueueEntry(partition, entry_id, run.decode(errors="replace"))
