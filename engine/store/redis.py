"""The production store: plain Redis 7 (no modules) through ``redis.asyncio``.

Key layout (``P`` is the prefix, default ``pg``); every key of one run shares the hash
tag ``{<run_id>}`` so a run lives in one Redis Cluster slot and one Lua script may
touch all of it:

* ``P:{run}:meta``  hash — graph, status, seq (head), created_at, updated_at;
* ``P:{run}:rec``   list — step records, list index = seq;
* ``P:{run}:snap``  hash — seq → snapshot bytes;
* ``P:{run}:snaps`` sorted set — snapshot seqs (score = seq), to find the nearest one;
* ``P:{run}:lease`` string ``"<token>:<owner>"`` with PEXPIRE = the lease ttl;
* ``P:{run}:token`` counter — the last fencing token issued (INCR);
* ``P:runs``        sorted set — run ids by updated_at (another slot: the global index).

A commit is one round trip: a pipeline of one EVALSHA of the commit script (lease, head
and idempotency checks, then every write of the run) and one ZADD of the index, which is
outside the script because it lives in another slot. So the index can be ahead of the
runs (a refused commit still bumps it, an expired run leaves it behind); ``list_runs``
trusts only the per-run meta.

Retention (``ttl``): a commit with a finished status (completed, failed, cancelled) sets
that expiry on the run's keys; any other status removes it, so a waiting or parked run
never expires. The lease key keeps its own expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final, cast, final

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from phasegraph.errors import StoreError, StoreUnavailableError
from phasegraph.store import (
    FINISHED_STATUSES,
    check_commit,
    check_page,
    check_ttl,
    lease_held_error,
    lease_lost_error,
    redact_url,
    run_not_found_error,
    sequence_conflict_error,
)
from phasegraph.store.base import Commit, Lease, RunMeta, Store, StoredRun

__all__ = ["RedisStore"]

# Commits are idempotent, so a commit that met a connection error is retried: five
# attempts over about two seconds ride out a restart or failover without hanging long.
_COMMIT_BACKOFF: Final = (0.05, 0.15, 0.4, 1.2)
_HISTORY_BATCH: Final = 256
_INDEX_PRUNE_AFTER: Final = 300.0  # seconds an index entry without meta is left alone
_UNAVAILABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError)

# KEYS: lease, token. ARGV: op (acquire | renew | release), token, ttl ms, owner.
# Returns {token (0: refused or released), lease value of another holder, its pttl,
# server time sec, usec}. A lease key that expired is still ours while the counter
# shows our token (nobody took over); releasing burns the token so renew cannot revive it.
_LEASE: Final = """
local lease = redis.call('GET', KEYS[1])
local now = redis.call('TIME')
if ARGV[1] == 'acquire' then
  if lease then return {0, lease, redis.call('PTTL', KEYS[1]), now[1], now[2]} end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- seed a new counter from the server clock (ms) so a run whose keys expired by
    -- retention never hands out a token it already issued
    redis.call('SET', KEYS[2], now[1] .. string.sub(string.format('%06d', now[2]), 1, 3))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], token .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {token, '', 0, now[1], now[2]}
end
-- a live lease always carries the counter's token, so the counter alone tells
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return {0, lease or '', 0, now[1], now[2]} end
if ARGV[1] == 'renew' then
  redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[4], 'PX', ARGV[3])
  return {tonumber(ARGV[2]), '', 0, now[1], now[2]}
end
redis.call('DEL', KEYS[1])
redis.call('INCR', KEYS[2])
return {0, '', 0, now[1], now[2]}
"""

# KEYS: meta, rec, snap, snaps, lease, token.
# ARGV: token, seq, record, has_snapshot, snapshot, graph, status, created_at,
#       updated_at, retention ('' none, '0' persist, else expiry in ms).
# Returns {1} written, {2} already written (a retry), {-1, lease} lost, {-2, head}.
_COMMIT: Final = """
local lease = redis.call('GET', KEYS[5])
if not lease or string.sub(lease, 1, string.find(lease, ':', 1, true) - 1) ~= ARGV[1] then
  return {-1, lease or ''}
end
local seq = tonumber(ARGV[2])
local head = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
if seq <= head and redis.call('LINDEX', KEYS[2], seq) == ARGV[3] then return {2} end
if seq ~= head + 1 then return {-2, head} end
redis.call('RPUSH', KEYS[2], ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[5])
  redis.call('ZADD', KEYS[4], seq, ARGV[2])
end
redis.call('HSET', KEYS[1], 'graph', ARGV[6], 'status', ARGV[7], 'seq', ARGV[2],
  'created_at', ARGV[8], 'updated_at', ARGV[9])
if ARGV[10] ~= '' then
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]}) do
    if ARGV[10] == '0' then redis.call('PERSIST', key) else redis.call('PEXPIRE', key, ARGV[10]) end
  end
end
return {1}
"""

# KEYS: meta, rec, snap, snaps. ARGV: seq or ''. Returns {-1} no run, {-2, head} no
# such seq, {-3} no snapshot, or {1, graph, status, head, created, updated, seq,
# snapshot_seq, snapshot, records...}.
_READ: Final = """
local m = redis.call('HMGET', KEYS[1], 'graph', 'status', 'seq', 'created_at', 'updated_at')
if not m[3] then return {-1} end
local head = tonumber(m[3])
local seq = tonumber(ARGV[1]) or head
if seq < 0 or seq > head then return {-2, head} end
local s = redis.call('ZREVRANGEBYSCORE', KEYS[4], seq, '-inf', 'LIMIT', 0, 1)[1]
if not s then return {-3} end
local out = {1, m[1], m[2], head, m[4], m[5], seq, tonumber(s), redis.call('HGET', KEYS[3], s)}
if tonumber(s) < seq then
  local records = redis.call('LRANGE', KEYS[2], tonumber(s) + 1, seq)
  for i = 1, #records do out[#out + 1] = records[i] end
end
return out
"""


@final
class RedisStore(Store):
    """A store on a Redis server (or Redis Cluster: each run stays in one slot).

    Args:
        url: The ``redis://``, ``rediss://`` or ``unix://`` URL redis-py connects with.
        prefix: Prefix of every key this store touches.
        ttl: Seconds a finished run is kept after its last commit; ``None`` keeps it.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "pg",
        ttl: float | None = None,
    ) -> None:
        self._where = redact_url(url)  # for messages: never show a password
        # redis-py's own retries are off: a down server must fail fast, and only the
        # commit (idempotent) is retried, by us.
        self._client: Redis = Redis.from_url(
            url, socket_connect_timeout=2.0, socket_timeout=5.0, retry=Retry(NoBackoff(), 0)
        )
        self._prefix = prefix
        self._index = f"{prefix}:runs"
        self._retention = "" if ttl is None else str(_ms(ttl))
        self._lease_script = self._client.register_script(_LEASE)
        self._commit_script = self._client.register_script(_COMMIT)
        self._read_script = self._client.register_script(_READ)
        self._closed = False

    @property
    def prefix(self) -> str:
        """The prefix of every key this store touches."""
        return self._prefix

    def run_keys(self, run_id: str) -> tuple[str, ...]:
        """The keys of one run: meta, rec, snap, snaps, lease, token (one hash slot)."""
        base = f"{self._prefix}:{{{run_id}}}:"
        return tuple(base + suffix for suffix in _RUN_KEYS)

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease; see :meth:`Store.acquire`."""
        check_ttl(ttl)
        token, held, pttl, now = await self._lease("acquire", run_id, 0, ttl, owner)
        if not token:
            raise lease_held_error(run_id, _lease_owner(held), now + max(pttl, 0) / 1000)
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold; see :meth:`Store.renew`."""
        check_ttl(ttl)
        token, held, _, now = await self._lease(
            "renew", lease.run_id, lease.token, ttl, lease.owner
        )
        if not token:
            raise lease_lost_error(lease, _lease_owner(held) if held else None)
        return Lease(run_id=lease.run_id, owner=lease.owner, token=token, expires_at=now + ttl)

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours; see :meth:`Store.release`."""
        await self._lease("release", lease.run_id, lease.token, 1.0, lease.owner)

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step in one round trip; see :meth:`Store.commit`.

        A connection error is retried a few times (about two seconds in all): a commit
        whose reply was lost is found already written and succeeds.
        """
        check_commit(lease, commit)
        args = self._commit_args(lease, commit)
        keys = self.run_keys(lease.run_id)
        for delay in (*_COMMIT_BACKOFF, None):
            try:
                reply = await self._commit_once(keys, args, lease.run_id, commit.meta.updated_at)
                break
            except _UNAVAILABLE as exc:
                if delay is None:
                    raise self._unavailable(exc) from exc
                await asyncio.sleep(delay)
        code = int(reply[0])
        if code == -1:
            raise lease_lost_error(lease, _lease_owner(reply[1]) if reply[1] else None)
        if code == -2:
            raise sequence_conflict_error(lease.run_id, commit.seq, int(reply[1]))

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read a run at ``seq`` (default: head) in one round trip; see :meth:`Store.read`."""
        with self._errors():
            reply = await self._read_script(
                self.run_keys(run_id)[:4], ("" if seq is None else seq,)
            )
        code = int(reply[0])
        if code == -1:
            raise run_not_found_error(run_id)
        if code == -2:
            raise run_not_found_error(run_id, seq=seq, head=int(reply[1]))
        if code == -3:
            raise StoreError(f"run {run_id!r} has no snapshot at or below seq {seq}")
        return StoredRun(
            meta=_meta(run_id, reply[1:6]),
            seq=int(reply[6]),
            snapshot_seq=int(reply[7]),
            snapshot=reply[8],
            records=tuple(reply[9:]),
        )

    async def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(seq, record)`` for ``start <= seq < stop``; see :meth:`Store.history`.

        Records are read in batches; they never change once written, so batches agree.
        """
        meta_key, rec_key = self.run_keys(run_id)[:2]
        with self._errors():
            head = await self._client.hget(meta_key, "seq")
        if head is None:
            raise run_not_found_error(run_id)
        end = int(head) + 1 if stop is None else min(stop, int(head) + 1)
        for first in range(max(start, 0), end, _HISTORY_BATCH):
            with self._errors():
                last = min(first + _HISTORY_BATCH, end) - 1
                batch = cast("list[bytes]", await self._client.lrange(rec_key, first, last))
            for seq, record in enumerate(batch, first):
                yield seq, record

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first; see :meth:`Store.list_runs`."""
        check_page(limit, offset)
        wanted = limit + offset
        found: list[RunMeta] = []
        cursor, page = 0, min(max(wanted, 64), 1000)
        while len(found) < wanted:
            metas = await self._index_page(cursor, page)
            if metas is None:
                break
            cursor += page
            found += [meta for meta in metas if status is None or meta.status == status]
        return found[offset:wanted]

    async def aclose(self) -> None:
        """Close the connection pool. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(self._client.aclose())

    # ------------------------------------------------------------------ internals

    async def _lease(
        self, op: str, run_id: str, token: int, ttl: float, owner: str
    ) -> tuple[int, bytes, int, float]:
        """Run the lease script: (token or 0, other holder's lease value, its pttl, now)."""
        with self._errors():
            reply = await self._lease_script(
                self.run_keys(run_id)[4:], (op, token, _ms(ttl), owner)
            )
        return int(reply[0]), reply[1], int(reply[2]), int(reply[3]) + int(reply[4]) / 1e6

    def _commit_args(self, lease: Lease, commit: Commit) -> tuple[Any, ...]:
        meta, snapshot = commit.meta, commit.snapshot
        # '' leaves expiry alone (no retention), '0' persists, else the expiry in ms.
        finished = meta.status in FINISHED_STATUSES
        retention = self._retention if finished or not self._retention else "0"
        return (
            *(lease.token, commit.seq, commit.record),
            *((0, b"") if snapshot is None else (1, snapshot)),
            *(meta.graph, meta.status, meta.created_at, meta.updated_at, retention),
        )

    async def _commit_once(
        self, keys: Sequence[str], args: Sequence[Any], run_id: str, updated_at: float
    ) -> list[Any]:
        """Send the commit script and the index update together, in one round trip."""
        # EVALSHA is queued by hand: a Script object in a pipeline would first send
        # SCRIPT EXISTS on every execute, a second round trip per commit.
        for _ in range(2):
            pipe = self._client.pipeline(transaction=False)
            pipe.evalsha(self._commit_script.sha, len(keys), *keys, *args)
            pipe.zadd(self._index, {run_id: updated_at})
            reply, indexed = await pipe.execute(raise_on_error=False)
            if not isinstance(reply, NoScriptError):
                break
            # The server lost its script cache (restart, SCRIPT FLUSH): load and resend.
            await self._client.script_load(_COMMIT)
        for result in (reply, indexed):
            if isinstance(result, Exception):
                raise StoreError(f"Redis at {self._where} refused the commit: {result}")
        return list(reply)

    async def _index_page(self, start: int, size: int) -> list[RunMeta] | None:
        """Metas of the runs at index ranks ``start ..`` that still exist (None: no more)."""
        with self._errors():
            entries = cast(
                "list[tuple[bytes, float]]",
                await self._client.zrevrange(self._index, start, start + size - 1, withscores=True),
            )
            if not entries:
                return None
            pipe = self._client.pipeline(transaction=False)
            for run_id, _ in entries:
                pipe.hmget(self.run_keys(run_id.decode())[0], *_META_FIELDS)
            rows = await pipe.execute()
            # No meta: a refused first commit, or a run that retention expired. Prune old
            # entries only: a fresh one may belong to a first commit landing right now.
            old = time.time() - _INDEX_PRUNE_AFTER
            pairs = list(zip(entries, rows, strict=True))
            stale = [run_id for (run_id, score), row in pairs if row[2] is None and score < old]
            if stale:
                await self._client.zrem(self._index, *stale)
        metas = [_meta(run_id.decode(), row) for (run_id, _), row in pairs if row[2] is not None]
        # A refused commit may have bumped an index score; order by the meta itself.
        return sorted(metas, key=lambda meta: -meta.updated_at)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate driver errors into the store's error tree."""
        try:
            yield
        except _UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc
        except RedisError as exc:
            raise StoreError(f"Redis at {self._where} refused: {exc}") from exc

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        if self._closed:
            return StoreUnavailableError(f"the Redis store {self._where} is closed")
        return StoreUnavailableError(f"cannot reach Redis at {self._where}: {exc}")


_META_FIELDS: Final = ("graph", "status", "seq", "created_at", "updated_at")
_RUN_KEYS: Final = ("meta", "rec", "snap", "snaps", "lease", "token")


def _meta(run_id: str, row: Sequence[Any]) -> RunMeta:
    graph, status, seq, created_at, updated_at = row
    return RunMeta(
        run_id=run_id,
        graph=graph.decode(),
        status=status.decode(),
        seq=int(seq),
        created_at=float(created_at),
        updated_at=float(updated_at),
    )


def _lease_owner(lease_value: bytes) -> str:
    """The owner part of a lease value ``b"<token>:<owner>"``."""
    return lease_value.partition(b":")[2].decode(errors="replace")


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
