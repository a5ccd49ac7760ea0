"""The production store: plain Redis 7 (no modules), on one server or a Redis Cluster.

Key layout (``P`` is the prefix, default ``pg``); every key of one run shares the hash
tag ``{<run_id>}`` so a run lives in one Redis Cluster slot and one Lua script may
touch all of it:

* ``P:{run}:meta``  hash — graph, status, seq (head), created_at, updated_at;
* ``P:{run}:rec``   list — step records, list index = seq;
* ``P:{run}:snap``  hash — seq → snapshot bytes;
* ``P:{run}:snaps`` sorted set — snapshot seqs (score = seq), to find the nearest one;
* ``P:{run}:lease`` string ``"<token>:<owner>"`` with PEXPIRE = the lease ttl;
* ``P:{run}:token`` counter — the last fencing token issued (INCR);
* ``P:{run}:stream`` list — batches of live events of a durable stream's turns in
  flight (RPUSH; deleted once they are folded into committed steps);
* ``P:runs``        sorted set — run ids by updated_at (the global index);
* ``P:def:<key>``   string — a run definition's bytes under their digest, one key each
  (no hash tag: every command on it names that key alone, so any slot serves it).

On one server (``redis://``, ``rediss://``, ``unix://``) a commit is one command, one
round trip: an EVALSHA of the commit script, which checks the lease, the head and
idempotency, then makes every write of the run and updates the index. The store
remembers what it last committed for each run it holds, so a step sends only what
changed: usually the head alone (lease value, seq and time, record), packed after a prefix
kept per lease. Commands go
through :mod:`phasegraph.store._redis_wire`: every coroutine of the process shares one
connection, so concurrent runs' commits reach the server pipelined; redis-py parses the
URL.

On a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``, naming any one node)
the same wire keeps one such connection per primary and sends each command to the
primary serving its key's slot (:class:`~phasegraph.store._redis_wire.ClusterWire`).
The index is in another slot than any run, so the commit script writes the run alone
and the index is written with commands of its own: before a run's first commit (seq 0)
its entry is added if missing, so a run is never committed without being listed, even if
the process dies right after;
after every later commit (or a first one whose entry was there already) the entry's score
is set to the commit's updated_at. A process that
dies between a later commit and that second write leaves the run listed with the score
of an earlier commit: ``list_runs`` still shows it with its current meta, but the order
of runs across pages may lag until its next commit. A commit costs two round trips.

Retention can expire a run and leave its index entry behind, and on a cluster a refused
first commit leaves an entry with no run; ``list_runs`` trusts only the per-run meta and
prunes such entries once they are old.

Retention (``ttl``): a commit with a finished status (completed, failed, cancelled) sets
that expiry on the run's keys; any other status removes it, so a waiting or parked run
never expires. The lease key keeps its own expiry. A definition never expires: runs
share it, and none owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import struct
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final, cast, final
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url

from phasegraph.errors import InputError, StoreError, StoreUnavailableError
from phasegraph.store._holder import holder_gone
from phasegraph.store._meta import listed_meta, stored_meta, stored_seq
from phasegraph.store._open import (
    FINISHED_STATUSES,
    check_commit,
    check_page,
    check_ttl,
    is_cluster_url,
    journal_head_error,
    lease_held_error,
    lease_lost_error,
    node_url,
    redact_url,
    run_not_found_error,
    sequence_conflict_error,
)
from phasegraph.store._redis_lease import RedisLeaseLine, lease_owner, lease_reply
from phasegraph.store._redis_queue import RunQueue
from phasegraph.store._redis_scripts import (
    COMMIT,
    HEAD,
    LEASE,
    MESSAGES,
    POST_MESSAGE,
    READ,
    SCRIPT_SHA,
    TAKE_MESSAGES,
    ms,
)
from phasegraph.store._redis_wire import (
    CONNECT_TIMEOUT,
    Arg,
    ClusterWire,
    RedisWire,
    ReplyError,
    WireOptions,
    outage,
    pack,
    pack_parts,
)
from phasegraph.store.base import Commit, Lease, LeaseLine, Message, RunMeta, Store, StoredRun

__all__ = [
    "RedisStore",
]

# Commits are idempotent, so a commit that met a connection error is retried: five
# attempts over about two seconds ride out a restart or failover without hanging long.
_COMMIT_BACKOFF: Final = (0.05, 0.15, 0.4, 1.2)
_HISTORY_BATCH: Final = 256
_INDEX_PRUNE_AFTER: Final = 300.0  # seconds an index entry without meta is left alone
_UNAVAILABLE: Final = (ConnectionError, TimeoutError, OSError)
# Runs whose last commit is remembered (a few hundred bytes each; a run's entry goes when
# its lease is released): a bound on a process that never releases, not a cache policy.
_SENT_KEPT: Final = 100_000
_QUEUE_CONNECTIONS: Final = 32  # the work queue's pool: enough for a worker's blocking reads


@final
class RedisStore(Store):
    """A store on one Redis server, or on a Redis Cluster.

    Args:
        url: The ``redis://``, ``rediss://`` or ``unix://`` URL of a server, or the
            ``redis+cluster://`` or ``rediss+cluster://`` URL of any node of a cluster.
        prefix: Prefix of every key this store touches.
        ttl: Seconds a finished run is kept after its last commit; ``None`` keeps it.

    Raises:
        InputError: A URL option is unusable (the message names the URL).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "pg",
        ttl: float | None = None,
    ) -> None:
        self._url = url
        self._where = redact_url(url)  # for messages: never show a password
        self._cluster = is_cluster_url(url)
        options = _wire_options(node_url(url), self._where)
        self._prefix = prefix
        self._index = f"{prefix}:runs"
        self._retention = "" if ttl is None else str(ms(ttl))
        self._closed = False
        # One multiplexed connection to the server, or one to each primary of the cluster.
        self._wire: RedisWire | ClusterWire = (
            ClusterWire(options) if self._cluster else RedisWire(options)
        )
        # run id -> what this store last committed for it: the next commit sends only what
        # changed (see the COMMIT script)
        self._sent: dict[str, _Sent] = {}

    @property
    def prefix(self) -> str:
        """The prefix of every key this store touches."""
        return self._prefix

    def run_keys(self, run_id: str) -> tuple[str, ...]:
        """The keys of one run: meta, rec, snap, snaps, lease, token (one hash slot)."""
        base = f"{self._prefix}:{{{run_id}}}:"
        return tuple(base + suffix for suffix in _RUN_KEYS)

    def queue_client(self) -> Redis | RedisCluster:
        """A new redis-py asyncio client for the same server or cluster (the caller closes it).

        The worker processes' queue uses it: blocking reads (``XREADGROUP BLOCK``) need
        connections of their own, which the store's one shared connection cannot lend.
        Its pool waits for a free connection rather than failing when many coroutines
        queue runs at once (a busy ``serve --queue``).
        """
        if self._cluster:
            # A MOVED reply only repoints its slot (redis-py would otherwise drop every
            # connection, those of commands in flight too, after every fifth one).
            return RedisCluster.from_url(
                node_url(self._url), decode_responses=False, reinitialize_steps=0
            )
        pool = BlockingConnectionPool.from_url(
            self._url, max_connections=_QUEUE_CONNECTIONS, timeout=None
        )
        return Redis.from_pool(pool)  # the client owns the pool: aclose() closes it

    def work_queue(self, *, partitions: int = 1) -> RunQueue:
        """The run work queue on this server or cluster (:mod:`phasegraph.store._redis_queue`).

        Args:
            partitions: How many streams to spread runs over, if none is recorded yet.
        """
        return RunQueue(
            self.queue_client(), prefix=self._prefix, partitions=partitions, where=self._where
        )

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease; see :meth:`Store.acquire`.

        A run's first command (as a start's is) may have to open the connection: attempts
        that time out are made again for as long as the lease would wait for the server
        (``ttl``), rather than fail the run on one that a busy moment made slow.
        """
        check_ttl(ttl)
        with self._errors():
            await self._wire.open(self.run_keys(run_id)[4], patience=ttl)
        token, held, pttl, now = await self._lease("acquire", run_id, 0, ttl, owner)
        if not token and holder_gone(lease_owner(held)):
            # Its holder died on this machine: take over, but only if that lease is still
            # the one recorded (the script compares the whole value).
            token, held, pttl, now = await self._lease("takeover", run_id, 0, ttl, owner, held)
        if not token:
            raise lease_held_error(run_id, lease_owner(held), now + max(pttl, 0) / 1000)
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + ttl, ttl=ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold; see :meth:`Store.renew`."""
        check_ttl(ttl)
        token, held, _, now = await self._lease(
            "renew", lease.run_id, lease.token, ttl, lease.owner
        )
        if not token:
            raise lease_lost_error(lease, lease_owner(held) if held else None)
        return Lease(
            run_id=lease.run_id, owner=lease.owner, token=token, expires_at=now + ttl, ttl=ttl
        )

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours; see :meth:`Store.release`."""
        self._sent.pop(lease.run_id, None)
        await self._lease("release", lease.run_id, lease.token, 1.0, lease.owner)

    async def holder(self, run_id: str) -> str | None:
        """The owner of the run's live lease; see :meth:`Store.holder`."""
        with self._errors():
            held = await self._call("GET", self.run_keys(run_id)[4])
        return None if held is None else lease_owner(held)

    def lease_line(self) -> LeaseLine:
        """Renewals on a blocking connection of their own (redis-py), one pipeline a batch.

        They never queue behind the commits on the store's shared connection, nor wait
        for the event loop.
        """
        return RedisLeaseLine(self._url, self.run_keys, self._where)

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step with one command (two or three on a cluster); see :meth:`Store.commit`.

        A step that follows this store's last commit of the run under the same lease, with
        no change but the head, time and maybe a snapshot, sends three arguments (and the
        snapshot) after a prefix kept per lease; any other,
        or any reply but "written", goes the full way (which retries a connection error a
        few times, about two seconds in all: a commit whose reply was lost is found already
        written and succeeds).
        """
        check_commit(lease, commit)
        sent = self._sent.get(lease.run_id)
        meta = commit.meta
        seq = commit.seq
        if (
            sent is not None
            and not self._cluster  # whose index is written by commands of the store's own
            and sent.lease is lease
            and sent.seq == seq - 1
            and sent.low <= meta.updated_at < sent.high
            and sent.status == meta.status
            and sent.graph == meta.graph
            and sent.created_at == meta.created_at
        ):
            record, snapshot = commit.record, commit.snapshot
            if snapshot is None:
                head, more = sent.head, b""
            else:
                head, more = (
                    sent.head_more,
                    b"$8\r\nsnapshot\r\n$%d\r\n%s\r\n"
                    % (
                        len(snapshot),
                        snapshot,
                    ),
                )
            size = len(record)
            command = b"".join(
                (
                    head,
                    _SEQ_AT(seq, meta.updated_at),
                    b"\r\n",
                    _BULK_LINES[size] if size < _BULK_LINES_KEPT else b"$%d\r\n" % size,
                    record,
                    b"\r\n",
                    more,
                )
            )
            try:
                # Awaited here: no coroutine between the command and its reply.
                raw = await self._wire.request(command, sent.route)
            except _UNAVAILABLE:
                raw = None  # the full way retries
            if raw == 1:
                sent.seq = seq
                return
        await self._commit_in_full(lease, commit)

    async def _commit_in_full(self, lease: Lease, commit: Commit) -> None:
        """Commit with every argument the run may lack; connection errors retried a few times."""
        run_id = lease.run_id
        for delay in (*_COMMIT_BACKOFF, None):
            try:
                command, sent = self._full_command(lease, commit)
                if self._cluster:
                    raw = await self._send_commit(run_id, commit, command, sent.route)
                else:
                    raw = await self._run_script(COMMIT, command, sent.route)
                break
            except _UNAVAILABLE as exc:
                if delay is None or self._closed:
                    raise self._unavailable(exc) from exc
                await asyncio.sleep(delay)
        if raw == 1:
            if len(self._sent) >= _SENT_KEPT:
                self._sent.clear()
            self._sent[run_id] = sent
            return
        self._sent.pop(run_id, None)  # what the run holds is not what this store sent
        self._check_written(lease, commit, self._script_reply(raw))

    def _check_written(self, lease: Lease, commit: Commit, reply: list[Any]) -> None:
        """Raise the error a commit script's reply other than "written" (1) stands for.

        Raises:
            LeaseLostError: Another holder took the run.
            SequenceConflictError: The run's head is not the commit's seq minus one.
            JournalHeadError: The run's records do not end at its head.
            StoreError: Any reply the script does not give.
        """
        code = int(reply[0])
        if code == 2:
            return  # already written: a retry whose first attempt landed
        if code == -1:
            raise lease_lost_error(lease, lease_owner(reply[1]) if reply[1] else None)
        if code == -2:
            raise sequence_conflict_error(lease.run_id, commit.seq, int(reply[1]))
        if code == -3:
            raise journal_head_error(lease.run_id, int(reply[1]), int(reply[2]))
        # -4 (lease key expired, no ttl sent) cannot come back: the full command has the ttl
        raise StoreError(f"Redis at {self._where} answered a commit with {reply!r}")

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read a run at ``seq`` (default: head) in one round trip; see :meth:`Store.read`."""
        with self._errors():
            reply = await self._eval(READ, self.run_keys(run_id)[:4], ("" if seq is None else seq,))
        code = int(reply[0])
        if code == -1:
            raise run_not_found_error(run_id)
        if code == -2:
            raise run_not_found_error(run_id, seq=seq, head=int(reply[1]))
        if code == -3:
            raise StoreError(
                f"run {run_id!r} has no snapshot at or below seq {seq}", run_id=run_id, seq=seq
            )
        if code == -4:
            stored_seq(run_id, reply[1])  # raises, naming the run: the head is not a number
            raise StoreError(f"run {run_id!r} has an unreadable head seq", run_id=run_id)
        if code == -5:
            raise journal_head_error(run_id, int(reply[1]), int(reply[2]) - 1)
        return StoredRun(
            meta=stored_meta(run_id, tuple(reply[1:6])),
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
        The head they are read up to is first checked against the records stored.
        """
        keys = self.run_keys(run_id)[:2]
        with self._errors():
            found = await self._eval(HEAD, keys, ())
        if int(found[0]) < 0:
            raise run_not_found_error(run_id)
        head = stored_seq(run_id, found[1])
        if int(found[2]) != head + 1:
            raise journal_head_error(run_id, head, int(found[2]) - 1)
        rec_key = keys[1]
        end = head + 1 if stop is None else min(stop, head + 1)
        for first in range(max(start, 0), end, _HISTORY_BATCH):
            last = min(first + _HISTORY_BATCH, end) - 1
            batch = cast("list[bytes]", await self._call("LRANGE", rec_key, first, last))
            for seq, record in enumerate(batch, first):
                yield seq, record

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first; see :meth:`Store.list_runs`.

        The index orders runs by a score at most a minute below their ``updated_at``
        (see the COMMIT script), never above it: pages are read until no run left
        unread can come before the last one wanted, then the runs are ordered by their
        metadata.
        """
        check_page(limit, offset)
        wanted = limit + offset
        found: list[RunMeta] = []
        cursor, page = 0, min(max(wanted, 64), 1000)
        while True:
            read = await self._index_page(cursor, page)
            if read is None:
                break
            metas, lowest = read
            cursor += page
            found += [meta for meta in metas if status is None or meta.status == status]
            if len(found) >= wanted:
                found.sort(key=_newest_first)
                if found[wanted - 1].updated_at >= lowest + _SCORE_SLACK:
                    break  # every run unread was updated before the last one wanted
        found.sort(key=_newest_first)
        return found[offset:wanted]

    async def put_definition(self, key: str, body: bytes) -> None:
        """Keep a definition's bytes once (``SET NX``); see :meth:`Store.put_definition`.

        Idempotent, so a connection error is retried as a commit's is.
        """
        command = ("SET", self.definition_key(key), body, "NX")
        for delay in (*_COMMIT_BACKOFF, None):
            try:
                reply = await self._wire.call(*command)
                break
            except _UNAVAILABLE as exc:
                if delay is None or self._closed:
                    raise self._unavailable(exc) from exc
                await asyncio.sleep(delay)
        self._refused(command, reply)  # nil: kept already, which is fine

    async def get_definition(self, key: str) -> bytes | None:
        """The definition kept under ``key`` (``GET``); see :meth:`Store.get_definition`."""
        reply = await self._call("GET", self.definition_key(key))
        return None if reply is None else bytes(reply)

    async def has_definition(self, key: str) -> bool:
        """Whether a definition is kept under ``key`` (``EXISTS``)."""
        return bool(await self._call("EXISTS", self.definition_key(key)))

    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Put a message in the run's inbox once (one script); see :meth:`Store.post_message`."""
        with self._errors():
            reply = await self._eval(POST_MESSAGE, self._inbox_keys(run_id), (message_id, body, at))
        fresh, position, kept, when = reply
        message = Message(
            run_id=run_id, position=int(position), id=message_id, body=bytes(kept), at=float(when)
        )
        return message, bool(fresh)

    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """The run's messages past ``after`` (one script); see :meth:`Store.messages`."""
        args = ("" if after is None else max(after, 0), max(limit, 0))
        with self._errors():
            flat = await self._eval(MESSAGES, self._inbox_keys(run_id), args)
        return [
            Message(
                run_id=run_id,
                position=int(flat[i]),
                id=bytes(flat[i + 1]).decode(),
                body=bytes(flat[i + 2]),
                at=float(flat[i + 3]),
            )
            for i in range(0, len(flat), 4)
        ]

    async def take_messages(self, run_id: str, position: int) -> None:
        """Move the run's inbox cursor on (one script); see :meth:`Store.take_messages`."""
        ids, _, taken = self._inbox_keys(run_id)
        with self._errors():
            await self._eval(TAKE_MESSAGES, (ids, taken), (position,))

    def _inbox_keys(self, run_id: str) -> tuple[str, str, str]:
        """The keys of the run's inbox (ids, messages, cursor), in the run's hash slot."""
        base = f"{self._prefix}:{{{run_id}}}:"
        return base + "msgid", base + "msg", base + "msgtaken"

    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Append live events (``RPUSH``); see :meth:`Store.append_stream`."""
        await self._call("RPUSH", self.stream_key(run_id), batch)

    async def read_stream(self, run_id: str) -> list[bytes]:
        """The live-event batches (``LRANGE``); see :meth:`Store.read_stream`."""
        reply = await self._call("LRANGE", self.stream_key(run_id), 0, -1)
        return [bytes(item) for item in reply or ()]

    async def drop_stream(self, run_id: str) -> None:
        """Forget the live-event batches (``DEL``); see :meth:`Store.drop_stream`."""
        await self._call("DEL", self.stream_key(run_id))

    def stream_key(self, run_id: str) -> str:
        """The Redis key of a run's durable live stream (in the run's hash slot)."""
        return f"{self._prefix}:{{{run_id}}}:stream"

    def definition_key(self, key: str) -> str:
        """The Redis key a definition's bytes are kept under."""
        return f"{self._prefix}:def:{key}"

    async def aclose(self) -> None:
        """Close the connection. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(self._wire.aclose())

    # ------------------------------------------------------------------ internals

    async def _lease(
        self, op: str, run_id: str, token: int, ttl: float, owner: str, seen: bytes = b""
    ) -> tuple[int, bytes, int, float]:
        """Run the lease script: (token or 0, other holder's lease value, its pttl, now)."""
        with self._errors():
            keys = self.run_keys(run_id)[4:]
            reply = await self._eval(LEASE, keys, (op, token, ms(ttl), owner, seen))
        return lease_reply(reply)

    def _full_command(self, lease: Lease, commit: Commit) -> tuple[bytes, _Sent]:
        """The commit's EVALSHA with every argument this store cannot be sure the run has.

        Also returns what the run holds once it is written. On one server the index entry
        moves with it when its minute changes; a cluster's store writes the index itself.
        """
        run_id, meta, seq = lease.run_id, commit.meta, commit.seq
        known = self._sent.get(run_id)
        if known is not None and known.seq != seq - 1:
            known = None  # not the run's head as this store left it
        value = f"{lease.token}:{lease.owner}".encode()
        pairs: list[Arg] = ["ttl", ms(lease.ttl)]
        if known is None or (known.graph, known.created_at) != (meta.graph, meta.created_at):
            pairs += ("graph", meta.graph, "created_at", b"%.17g" % meta.created_at)
        if known is None or known.status != meta.status:
            pairs += ("status", meta.status)
        if self._retention:
            # '0' removes an expiry a finished status set; a finished run's expiry counts
            # from its last commit
            if meta.status in FINISHED_STATUSES:
                pairs += ("expire", self._retention)
            elif known is None or known.status in FINISHED_STATUSES:
                pairs += ("expire", "0")
        meta_key = self.run_keys(run_id)[0]
        keys: tuple[str, ...] = (meta_key,)
        low, high = -math.inf, math.inf
        if not self._cluster:
            minute = meta.updated_at // 60 * 60  # the index scores by the minute
            low, high = minute, minute + 60
            # The entry moves when the minute differs from the last commit's (or time went back)
            if known is None or not known.low <= meta.updated_at < known.high:
                keys = (meta_key, self._index)
                pairs += ("listed", b"%d" % minute)
        if commit.snapshot is not None:
            pairs += ("snapshot", commit.snapshot)
        at = _SEQ_AT(seq, meta.updated_at)
        args: tuple[Arg, ...] = ("EVALSHA", SCRIPT_SHA[COMMIT], len(keys), *keys, value, at)
        command = pack((*args, commit.record, *pairs))
        # Up to the seq and time's length (always 16): what every quiet step starts with.
        head = pack_parts(("EVALSHA", SCRIPT_SHA[COMMIT], 1, meta_key, value)) + b"$16\r\n"
        sent = _Sent(
            lease=lease,
            seq=seq,
            head=b"*7\r\n" + head,
            head_more=b"*9\r\n" + head,
            route=meta_key,
            status=meta.status,
            graph=meta.graph,
            created_at=meta.created_at,
            low=low,
            high=high,
        )
        return command, sent

    async def _send_commit(self, run_id: str, commit: Commit, command: bytes, route: str) -> Any:
        """On a cluster: the commit script's reply (an error reply as a value).

        The index is in a slot of its own and written with commands of its own (on one
        server the script lists the run itself: the index is among its keys); each may
        be sent again when the caller retries after a connection error (the commit is
        idempotent, the index writes too), and the reply is the script's or the first
        error reply of the three commands.
        """
        updated_at = commit.meta.updated_at
        listed = 0
        if commit.seq == 0:
            # Listed before it exists, so a crash after the commit cannot leave it unlisted.
            # NX: a refused seq 0 (the id is taken) never moves a listed run's score.
            listed = await self._wire.call("ZADD", self._index, "NX", updated_at, run_id)
            if isinstance(listed, ReplyError):
                return listed
        reply = await self._run_script(COMMIT, command, route)
        # Written (now or before), and not just listed with this very score.
        written = reply == 1 or (type(reply) is list and int(reply[0]) == 2)
        if written and listed != 1:
            moved = await self._wire.call("ZADD", self._index, updated_at, run_id)
            if isinstance(moved, ReplyError):
                return moved
        return reply

    async def _eval(self, script: str, keys: Sequence[str], args: Sequence[Arg]) -> list[Any]:
        """Run a script by its digest (sent in full if the server does not have it).

        Connection errors are raised as they are (the caller decides about retrying);
        an error reply becomes a :class:`StoreError` (see :meth:`_script_reply`).
        """
        command = pack(("EVALSHA", SCRIPT_SHA[script], len(keys), *keys, *args))
        return self._script_reply(await self._run_script(script, command, keys[0]))

    async def _run_script(self, script: str, command: bytes, route: str) -> Any:
        """The reply to a packed EVALSHA of ``script``, routed by the key ``route``.

        A server that does not have the script (a new one, a restart, SCRIPT FLUSH) gets
        it once as EVAL, which also keeps it there for the next EVALSHA.
        """
        reply = await self._wire.call_packed(command, route)
        if isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"):
            reply = await self._wire.call_packed(_in_full(script, command), route)
        return reply

    def _script_reply(self, reply: Any) -> list[Any]:
        """A script's reply; an error reply is a :class:`StoreError`.

        Raises:
            StoreUnavailableError: The server is loading its data, failing over or full
                (see :func:`~phasegraph.store._redis_wire.outage`): try later.
            StoreError: The server refused the script.
        """
        if isinstance(reply, ReplyError):
            raise outage(self._where, str(reply)) or StoreError(
                f"Redis at {self._where} refused: {reply}"
            )
        return cast("list[Any]", reply)

    async def _call(self, command: str, *args: Arg) -> Any:
        """One plain command, errors translated into the store's error tree."""
        (reply,) = await self._call_many([(command, *args)])
        return reply

    async def _call_many(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Plain commands in one write; any refusal is a :class:`StoreError`."""
        with self._errors():
            replies = await self._wire.call_many(commands)
        for command, reply in zip(commands, replies, strict=True):
            self._refused(command, reply)
        return replies

    def _refused(self, command: Sequence[Arg], reply: Any) -> None:
        """Raise :class:`StoreError` if ``reply`` (to ``command``) is an error reply.

        Raises:
            StoreUnavailableError: The server is loading its data, failing over or full
                (as for a script: the caller may retry).
            StoreError: The server refused the command.
        """
        if isinstance(reply, ReplyError):
            raise outage(self._where, str(reply)) or StoreError(
                f"Redis at {self._where} refused {command[0]!s}: {reply}"
            )

    async def _index_page(self, start: int, size: int) -> tuple[list[RunMeta], float] | None:
        """The runs at index ranks ``start ..`` that still exist, and the lowest score read.

        ``None`` when there are no more.
        """
        flat = cast(
            "list[bytes]",
            await self._call("ZREVRANGE", self._index, start, start + size - 1, "WITHSCORES"),
        )
        if not flat:
            return None
        entries = [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]
        # Each run's meta, and how many records it holds (a listing marks a run whose
        # records do not end at its head, as a read refuses it).
        commands: list[tuple[Arg, ...]] = []
        for run_id, _ in entries:
            meta_key, rec_key = self.run_keys(run_id.decode())[:2]
            commands += (("HMGET", meta_key, *_META_FIELDS), ("LLEN", rec_key))
        replies = await self._call_many(commands)
        rows, counts = replies[::2], replies[1::2]
        # No meta: a run that retention expired, or (cluster) a refused first commit.
        # Prune old entries only: a fresh one may belong to a first commit landing now.
        old = time.time() - _INDEX_PRUNE_AFTER
        pairs = list(zip(entries, rows, counts, strict=True))
        stale = [run_id for (run_id, score), row, _ in pairs if row[2] is None and score < old]
        if stale:
            await self._call("ZREM", self._index, *stale)
        metas = [
            listed_meta(run_id.decode(errors="backslashreplace"), tuple(row), int(count) - 1)
            for (run_id, _), row, count in pairs
            if row[2] is not None
        ]
        return metas, entries[-1][1]

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate connection failures into :class:`StoreUnavailableError`."""
        try:
            yield
        except _UNAVAILABLE as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        if self._closed:
            return StoreUnavailableError(f"the Redis store {self._where} is closed")
        return StoreUnavailableError(f"cannot reach Redis at {self._where}: {exc}")


def _in_full(script: str, command: bytes) -> bytes:
    """A packed EVALSHA of ``script`` as the same EVAL: the script itself, not its digest."""
    by_digest = pack_parts(("EVALSHA", SCRIPT_SHA[script]))
    after_count = command.index(b"\r\n") + 2  # the array header: *<count>\r\n
    rest = command[after_count + len(by_digest) :]
    return command[:after_count] + pack_parts(("EVAL", script)) + rest


_META_FIELDS: Final = ("graph", "status", "seq", "created_at", "updated_at")
# How far below a run's updated_at its index score may be: the COMMIT script scores by
# the minute (a cluster's commits, and older versions, by updated_at itself).
_SCORE_SLACK: Final = 60.0


def _newest_first(meta: RunMeta) -> tuple[float, str]:
    return -meta.updated_at, meta.run_id


_RUN_KEYS: Final = ("meta", "rec", "snap", "snaps", "lease", "token")
# A commit's seq and updated_at, as the COMMIT script unpacks them.
_SEQ_AT: Final = struct.Struct("<dd").pack
# The length line of a bulk string (``$<size>`` and CRLF) of each size a step record
# usually has, made once: formatting it per commit costs more than the rest of the command.
_BULK_LINES_KEPT: Final = 2048
_BULK_LINES: Final = tuple(b"$%d\r\n" % size for size in range(_BULK_LINES_KEPT))


@final
class _Sent:
    """What one run holds after this store's last commit of it, as the store sent it.

    Attributes:
        lease: The lease the commit was made under.
        seq: The commit's seq (the run's head, unless another writer came since: the
            script then refuses the next commit, which goes the full way).
        head: The packed start of a commit command that moves only the head: its array
            header, EVALSHA, digest, the meta key, the lease value, and the length of the
            packed seq and time, which follow, then the record.
        head_more: The same for a command that also carries a snapshot (one more pair).
        route: The key the command is routed by (meta).
        status: The status written.
        graph: The graph written.
        created_at: The creation time written.
        low: Where the minute of the index score written starts (one server).
        high: Where it ends.
    """

    __slots__ = (
        "created_at",
        "graph",
        "head",
        "head_more",
        "high",
        "lease",
        "low",
        "route",
        "seq",
        "status",
    )

    def __init__(
        self,
        *,
        lease: Lease,
        seq: int,
        head: bytes,
        head_more: bytes,
        route: str,
        status: str,
        graph: str,
        created_at: float,
        low: float,
        high: float,
    ) -> None:
        self.lease = lease
        self.seq = seq
        self.head = head
        self.head_more = head_more
        self.route = route
        self.status = status
        self.graph = graph
        self.created_at = created_at
        self.low = low
        self.high = high


def _wire_options(url: str, where: str) -> WireOptions:
    """Connection options from a store URL (its form already checked by ``open_store``).

    Raises:
        InputError: An option value is unusable (``where`` names the URL).
    """
    try:
        found: dict[str, Any] = dict(parse_url(url))
    except ValueError as exc:  # redis-py's own check of an option value
        raise _unusable(where, exc) from None
    tls = None
    if urlsplit(url).scheme == "rediss":
        tls = _tls_context(found, where)
    return WireOptions(
        host=str(found.get("host", "127.0.0.1")),
        port=int(found.get("port", 6379)),
        path=found.get("path"),
        db=int(found.get("db", 0)),
        username=found.get("username"),
        password=found.get("password"),
        client_name=found.get("client_name"),
        connect_timeout=float(found.get("socket_connect_timeout", CONNECT_TIMEOUT)),
        timeout=float(found.get("socket_timeout", 5.0)),
        tls=tls,
    )


def _tls_context(found: dict[str, Any], where: str) -> ssl.SSLContext:
    """TLS settings from ``ssl_*`` URL options (by default: verify the server).

    Raises:
        InputError: A certificate file cannot be read or loaded, or ``ssl_cert_reqs`` is
            not a known level.
    """
    cafile = found.get("ssl_ca_certs")
    try:
        context = ssl.create_default_context(cafile=cafile)
    except OSError as exc:
        why = f"cannot read ssl_ca_certs {cafile!r}: {exc.strerror or exc}"
        raise _unusable(where, why) from None
    required = str(found.get("ssl_cert_reqs", "required")).lower()
    if required not in _CERT_REQS:
        raise _unusable(where, f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
    context.check_hostname = bool(found.get("ssl_check_hostname", True)) and required != "none"
    context.verify_mode = _CERT_REQS[required]
    certfile = found.get("ssl_certfile")
    if certfile:
        try:
            context.load_cert_chain(certfile, found.get("ssl_keyfile"))
        except OSError as exc:  # ssl.SSLError is one too: a key that does not match, say
            raise _unusable(where, f"cannot load ssl_certfile {certfile!r}: {exc}") from None
    return context


def _unusable(where: str, why: object) -> InputError:
    return InputError(f"store URL {where}: {why}")


_CERT_REQS: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
