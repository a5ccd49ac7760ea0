"""The Postgres store: the database a team already runs, backs up and monitors.

Tables and statements are in :mod:`phasegraph.store._postgres_schema`; connections (a
pool, the lease keeper's blocking connection, a worker's listener) and the mapping of
driver errors in :mod:`phasegraph.store._postgres_db`, the one owner of ``psycopg``.

A commit is **one statement**, so one transaction and one round trip: it moves the run's
head only if the lease's fencing token is the run's current one and the seq follows the
head (the check is the ``UPDATE``'s own ``WHERE``, so a rival that takes the run between
the check and the write cannot exist: the row lock orders them), writes the record and,
when due, the snapshot, and updates the metadata; if the head did not move nothing is
written. Only a refused commit looks closer, to say why (lease lost, seq conflict, or
the same commit again, which succeeds). Payloads are ``bytea`` columns sent and read in
binary.

Leases are rows: the owner, the last fencing token issued and the expiry by the
server's clock. An expired lease nobody took over is still its holder's (the token
fences, not the clock); ``acquire`` takes a free or expired lease with the next token,
or a live one whose holder provably died on this host, atomically, only while that
holder's token is still the one recorded. Advisory locks are used for schema migrations
only.

Retention (``ttl``): a commit with a finished status (completed, failed, cancelled) sets
the run's expiry that many seconds ahead, any other status clears it; an expired run
reads as gone at once and its rows are deleted, a batch at a time, by the next run that
finishes. A restarted server is an outage like any other: statements fail with
:class:`~phasegraph.errors.StoreUnavailableError` until it answers, pooled connections
it closed are replaced before use, and commits are idempotent, so the run core's retries
are safe.

Run definitions are rows of their own (``definitions``: digest → ``bytea``), written once
per content with ``ON CONFLICT DO NOTHING``; no run owns one, so the sweep leaves them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final, final

from phasegraph.errors import StoreError
from phasegraph.store._holder import holder_gone
from phasegraph.store._meta import listed_meta, stored_meta
from phasegraph.store._open import (
    FINISHED_STATUSES,
    check_commit,
    check_page,
    check_ttl,
    journal_head_error,
    lease_held_error,
    lease_lost_error,
    run_not_found_error,
    sequence_conflict_error,
)
from phasegraph.store._postgres_db import Database, DuplicateKey, PostgresOptions
from phasegraph.store._postgres_lease import PostgresLeaseLine
from phasegraph.store._postgres_queue import PostgresRunQueue
from phasegraph.store._postgres_schema import DEFAULT_SCHEMA, Statements
from phasegraph.store.base import Commit, Lease, LeaseLine, Message, RunMeta, Store, StoredRun

__all__ = ["PostgresStore"]

_HISTORY_BATCH: Final = 1024


@final
class PostgresStore(Store):
    """A store in a Postgres database (version 12 or later).

    Args:
        conninfo: A libpq URL (``open_store`` builds it from the store URL; it may hold
            a password).
        where: The URL as messages show it (password masked).
        password: The password, if any (scrubbed from every driver message).
        schema: The Postgres schema of the tables.
        pool_size: Connections the store's pool keeps at most.
        ttl: Seconds a finished run is kept after its last commit; ``None`` keeps it.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        where: str,
        password: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        pool_size: int = 8,
        ttl: float | None = None,
    ) -> None:
        options = PostgresOptions(
            conninfo=conninfo, where=where, password=password, schema=schema, pool_size=pool_size
        )
        self._db = Database(options)
        self._sql = Statements.of(schema)
        self._ttl = ttl

    @property
    def schema(self) -> str:
        """The Postgres schema the store's tables live in."""
        return self._db.options.schema

    @property
    def where(self) -> str:
        """The database's URL, its password masked."""
        return self._db.where

    async def migrate(self) -> tuple[int, int]:
        """Create the tables, or bring them to this phasegraph's layout, now.

        Done on first use anyway; ``phasegraph store migrate URL`` calls it on purpose.

        Returns:
            The layout version found (0: none) and the version the schema has now.
        """
        return await self._db.migrate()

    def work_queue(self, *, partitions: int = 1) -> PostgresRunQueue:
        """The workers' queue in the same database (one queue: ``partitions`` is ignored)."""
        return PostgresRunQueue(self._db, self._sql)

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease; see :meth:`Store.acquire`."""
        check_ttl(ttl)
        took = await self._db.one(self._sql.acquire, (run_id, owner, ttl, 0))
        if took is None:
            held = await self._db.one(self._sql.lease_of, (run_id,))
            if held is not None and holder_gone(held[0]):
                # Its holder died on this machine: take over, but only while its token
                # is still the run's (a rival that took it first has a newer one).
                took = await self._db.one(self._sql.acquire, (run_id, owner, ttl, held[1]))
            if took is None:
                if held is None:  # released or lapsed in between: try once more
                    took = await self._db.one(self._sql.acquire, (run_id, owner, ttl, 0))
                if took is None:
                    raise lease_held_error(run_id, *self._holder_of(held))
        token, expires_at = took
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=expires_at, ttl=ttl)

    @staticmethod
    def _holder_of(held: tuple[object, ...] | None) -> tuple[str, float]:
        if held is None:
            return "another process", 0.0
        return str(held[0]), float(str(held[2]))

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold; see :meth:`Store.renew`."""
        check_ttl(ttl)
        row = await self._db.one(self._sql.renew, (ttl, lease.run_id, lease.token))
        if row is None:
            raise lease_lost_error(lease, await self.holder(lease.run_id))
        return Lease(
            run_id=lease.run_id, owner=lease.owner, token=lease.token, expires_at=row[0], ttl=ttl
        )

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours; see :meth:`Store.release`."""
        await self._db.run(self._sql.release, (lease.run_id, lease.token))

    async def holder(self, run_id: str) -> str | None:
        """The owner of the run's live lease; see :meth:`Store.holder`."""
        row = await self._db.one(self._sql.holder, (run_id,))
        return None if row is None else str(row[0])

    def lease_line(self) -> LeaseLine:
        """Renewals on a blocking connection of their own, one statement a batch."""
        return PostgresLeaseLine(self._db.blocking(), self._sql)

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step with one statement; see :meth:`Store.commit` and the module doc."""
        check_commit(lease, commit)
        meta, seq, sql = commit.meta, commit.seq, self._sql
        expires = self._ttl if meta.status in FINISHED_STATUSES else None
        params = [
            seq,
            meta.graph,
            meta.status,
            meta.created_at,
            meta.updated_at,
            meta.updated_at // 60 * 60,  # the listing's minute
            expires,
            lease.ttl,
            lease.run_id,
            lease.token,
            seq - 1,
            seq,
            commit.record,
        ]
        if commit.snapshot is None:
            statement = sql.commit
        else:
            statement = sql.commit_snapshot
            params += (seq, commit.snapshot)
        try:
            row = await self._db.one(statement, params)
        except DuplicateKey:
            # The head moved but a record is already stored at its seq: one lies past
            # the head (the head was moved back outside phasegraph). Nothing was written.
            last = await self._db.one(sql.last_record, (lease.run_id,))
            stored = -1 if last is None or last[0] is None else int(last[0])
            raise journal_head_error(lease.run_id, seq - 1, stored) from None
        if row is None or not row[0]:
            await self._refused(lease, commit)
        elif expires is not None:
            await self._db.one(sql.sweep)  # a run finished: expired ones go now

    async def _refused(self, lease: Lease, commit: Commit) -> None:
        """Say why a commit did not move the head, or return if it is a retry already stored.

        Raises:
            LeaseLostError: The lease is not the run's current one.
            SequenceConflictError: The lease is fine but ``commit.seq`` is not the head + 1.
        """
        run_id = lease.run_id
        row = await self._db.one(self._sql.refused, (run_id,))
        if row is None or row[1] is None or row[2] != lease.token:
            live = row is not None and row[1] is not None and row[3]
            raise lease_lost_error(lease, str(row[1]) if row is not None and live else None)
        head = int(row[0])
        if commit.seq <= head:
            stored = await self._db.one(self._sql.record_at, (run_id, commit.seq))
            if stored is not None and bytes(stored[0]) == commit.record:
                return  # the same commit again (a retry whose first attempt landed)
        raise sequence_conflict_error(run_id, commit.seq, head)

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read a run at ``seq`` (default: head) in two statements; see :meth:`Store.read`."""
        meta = await self._meta(run_id)
        target = meta.seq if seq is None else seq
        if not 0 <= target <= meta.seq:
            raise run_not_found_error(run_id, seq=target, head=meta.seq)
        rows = await self._db.all(self._sql.read_body, (run_id, target, run_id, target))
        if not rows:
            raise StoreError(
                f"run {run_id!r} has no snapshot at or below seq {target}",
                run_id=run_id,
                seq=target,
            )
        (snapshot_seq, snapshot), records = rows[0], rows[1:]
        return StoredRun(
            meta=meta,
            seq=target,
            snapshot_seq=snapshot_seq,
            snapshot=bytes(snapshot),
            records=tuple(bytes(record) for _, record in records),
        )

    async def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(seq, record)`` for ``start <= seq < stop``; see :meth:`Store.history`.

        The head is checked against the records first; records never change once
        written, so the batches after agree with it.
        """
        head = (await self._meta(run_id)).seq
        end = head + 1 if stop is None else min(stop, head + 1)
        seq = max(start, 0)
        while seq < end:
            rows = await self._db.all(self._sql.records_from, (run_id, seq, end, _HISTORY_BATCH))
            if not rows:
                break  # records end early: never spin
            for row_seq, record in rows:
                yield row_seq, bytes(record)
            seq = rows[-1][0] + 1

    async def history_list(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Every ``(seq, record)`` of :meth:`history`, in one statement after the head's."""
        head = (await self._meta(run_id)).seq
        end = head + 1 if stop is None else min(stop, head + 1)
        first = max(start, 0)
        if first >= end:
            return []
        rows = await self._db.all(self._sql.records_from, (run_id, first, end, end - first))
        return [(row_seq, bytes(record)) for row_seq, record in rows]

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first; see :meth:`Store.list_runs`."""
        check_page(limit, offset)
        if status is None:
            rows = await self._db.all(self._sql.list_all, (limit, offset))
        else:
            rows = await self._db.all(self._sql.list_status, (status, limit, offset))
        return [
            listed_meta(str(row[0]), tuple(row[1:6]), -1 if row[6] is None else int(row[6]))
            for row in rows
        ]

    async def put_definition(self, key: str, body: bytes) -> None:
        """Keep a definition's bytes once; see :meth:`Store.put_definition`."""
        await self._db.run(self._sql.put_definition, (key, body))

    async def get_definition(self, key: str) -> bytes | None:
        """The definition kept under ``key``; see :meth:`Store.get_definition`."""
        row = await self._db.one(self._sql.get_definition, (key,))
        return None if row is None else bytes(row[0])

    async def has_definition(self, key: str) -> bool:
        """Whether a definition is kept under ``key``; see :meth:`Store.has_definition`."""
        row = await self._db.one(self._sql.has_definition, (key,))
        return row is not None and bool(row[0])

    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Put a message in the run's inbox once; see :meth:`Store.post_message`."""
        while True:
            row = await self._db.one(self._sql.post_message, (run_id, message_id, body, at, run_id))
            if row is not None:
                position = int(row[0])
                kept = Message(run_id=run_id, position=position, id=message_id, body=body, at=at)
                return kept, True
            found = await self._db.one(self._sql.message_by_id, (run_id, message_id))
            if found is not None:
                position, stored, when = found
                kept = Message(
                    run_id=run_id,
                    position=int(position),
                    id=message_id,
                    body=bytes(stored),
                    at=float(when),
                )
                return kept, False
            # Another post took the position first: the next one is free.

    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """The run's messages past ``after``; see :meth:`Store.messages`."""
        if after is None:
            rows = await self._db.all(self._sql.messages, (run_id, run_id, max(limit, 0)))
        else:
            rows = await self._db.all(self._sql.messages_after, (run_id, after, max(limit, 0)))
        return [
            Message(run_id=run_id, position=int(p), id=i, body=bytes(b), at=float(a))
            for p, i, b, a in rows
        ]

    async def take_messages(self, run_id: str, position: int) -> None:
        """Move the run's inbox cursor on; see :meth:`Store.take_messages`."""
        await self._db.run(self._sql.take_messages, (run_id, position, run_id))

    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Append live events (a row); see :meth:`Store.append_stream`."""
        await self._db.run(self._sql.append_stream, (run_id, batch))

    async def read_stream(self, run_id: str) -> list[bytes]:
        """The live-event batches; see :meth:`Store.read_stream`."""
        rows = await self._db.all(self._sql.read_stream, (run_id,))
        return [bytes(row[0]) for row in rows]

    async def drop_stream(self, run_id: str) -> None:
        """Forget the live-event batches; see :meth:`Store.drop_stream`."""
        await self._db.run(self._sql.drop_stream, (run_id,))

    async def aclose(self) -> None:
        """Close the pool. Safe to call more than once."""
        await self._db.aclose()

    async def _meta(self, run_id: str) -> RunMeta:
        """The run's metadata, its head checked against its records: every read's start.

        Raises:
            RunNotFoundError: No such run (or retention expired it).
            StoreError: The metadata is unreadable.
            JournalHeadError: The last record stored is not at the head.
        """
        row = await self._db.one(self._sql.read_meta, (run_id, run_id))
        if row is None:
            raise run_not_found_error(run_id)
        meta = stored_meta(run_id, tuple(row[:5]))
        last = -1 if row[5] is None else int(row[5])
        if last != meta.seq:
            raise journal_head_error(run_id, meta.seq, last)
        return meta
