"""The workers' queue in the Postgres store's own database: rows, ``SKIP LOCKED`` and ``NOTIFY``.

A run that needs driving (created with ``--detach``, answered, resumed, or whose
deadline passed) is a row of ``work``. A worker takes rows nobody has taken with
``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)``, so two workers never take
one row and neither waits for the other; the row then names its consumer and the time
of its last heartbeat. It is deleted (acknowledged) only once its run is idle again and
its lease given back, so a row a worker took is never lost: while it drives the run the
worker keeps the heartbeat fresh, and when it dies the row's heartbeat ages until
another worker takes it over (``reclaim``, or sooner, ``stale`` and ``claim`` once the
run's lease is free). Who may commit is still decided by the run's lease and fencing
token, in the commit's own statement: a row taken over from a worker that is merely slow
finds the lease held and is retried later, never committed twice.

Writing a row also sends ``NOTIFY`` on the schema's channel (delivered when the
statement's transaction commits); a worker waits for it on a connection of its own
(``LISTEN``), and polls as well, so a lost notification, or a pooler that does not pass
them on, costs at most one poll interval.

Deadlines of waiting and parked runs are rows of ``due``; any live worker moves the due
ones into ``work`` with one statement that reads the server's clock. Replies and cancel
requests wait in ``inbox`` and ``cancels``, each written in one statement with its
wake-up row. There is one queue per schema: ``partitions`` is always 1.

The guarantee is the Redis queue's (:mod:`phasegraph.store._redis_queue`): every step's
action runs at least once and commits exactly once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from phasegraph.errors import InputError
from phasegraph.store._postgres_db import Database, Listener, Row
from phasegraph.store._postgres_schema import Statements

__all__ = ["PostgresRunQueue", "WorkRow"]

_INBOX_BATCH: Final = 100  # replies applied per look at a run's inbox


@dataclass(frozen=True, slots=True)
class WorkRow:
    """One piece of run work taken from the queue.

    Attributes:
        partition: Always 0 (one queue).
        entry_id: The row's id, as bytes (what acknowledging names).
        run_id: The run to drive.
        deliveries: How many times the row was handed out (1 the first time).
    """

    partition: int
    entry_id: bytes
    run_id: str
    deliveries: int = 1


@final
class PostgresRunQueue:
    """The run work queue in one Postgres schema (see the module doc).

    Args:
        db: The store's database (its pool is shared; the queue's listener is its own).
        sql: The store's statements.
    """

    def __init__(self, db: Database, sql: Statements) -> None:
        self._db = db
        self._sql = sql
        self._listener: Listener | None = None

    async def partitions(self) -> int:
        """One queue per schema (asked first by a worker: it also proves the database answers).

        Raises:
            StoreUnavailableError: The database cannot be reached.
        """
        await self._db.one(self._sql.version)
        return 1

    async def enqueue(self, run_id: str) -> None:
        """Ask for the run to be driven by some worker (a new run, a reply, a resume)."""
        await self._db.one(self._sql.enqueue, (run_id,))

    async def queued(self, run_id: str) -> bool:
        """Whether the run has a row no worker has finished (taken or not yet)."""
        row = await self._db.one(self._sql.queued, (run_id,))
        return bool(row and row[0])

    # -- mail for runs a worker is driving --------------------------------------------

    async def post_reply(self, run_id: str, reply: Mapping[str, Any]) -> None:
        """Hand a reply to whichever worker drives the run, with its wake-up (one statement)."""
        await self._db.one(self._sql.post_reply, (run_id, json.dumps(dict(reply))))

    async def replies(self, run_id: str) -> list[dict[str, Any]]:
        """The replies posted to the run, oldest first (kept until :meth:`replies_done`)."""
        rows = await self._db.all(self._sql.replies, (run_id, _INBOX_BATCH))
        return [json.loads(row[0]) for row in rows]

    async def replies_done(self, run_id: str, count: int) -> None:
        """Forget the first ``count`` replies (applied, or refused and logged)."""
        await self._db.run(self._sql.replies_done, (run_id, count))

    async def request_cancel(
        self, run_id: str, reason: str, *, actor: Mapping[str, Any] | None = None
    ) -> None:
        """Ask whichever worker drives the run to stop it and commit it as cancelled."""
        request = {"reason": reason, "actor": None if actor is None else dict(actor)}
        await self._db.one(self._sql.request_cancel, (run_id, json.dumps(request)))

    async def cancel_requested(self, run_id: str) -> dict[str, Any] | None:
        """A pending cancel request (``reason`` and ``actor``), if there is one."""
        row = await self._db.one(self._sql.cancel_requested, (run_id,))
        if row is None:
            return None
        with contextlib.suppress(ValueError):
            request = json.loads(row[0])
            if isinstance(request, dict) and isinstance(request.get("reason"), str):
                return {"reason": request["reason"], "actor": request.get("actor")}
        return {"reason": str(row[0]), "actor": None}

    async def cancel_done(self, run_id: str) -> None:
        """The run is cancelled (or had finished): drop the request."""
        await self._db.run(self._sql.cancel_done, (run_id,))

    async def schedule(self, run_id: str, due_ms: int) -> None:
        """Have the run driven once ``due_ms`` (ms since the epoch) has passed."""
        await self._db.run(self._sql.schedule, (run_id, due_ms))

    async def unschedule(self, run_id: str) -> None:
        """Forget the run's deadline (it finished, or a reply is driving it on)."""
        await self._db.run(self._sql.unschedule, (run_id,))

    async def deadline(self, run_id: str) -> int | None:
        """The run's recorded deadline in ms since the epoch, if it has one."""
        row = await self._db.one(self._sql.deadline, (run_id,))
        return None if row is None else int(row[0])

    # -- consuming ------------------------------------------------------------------------

    async def take(self, partition: int, consumer: str, count: int, block_ms: int) -> list[WorkRow]:
        """New rows for ``consumer`` (at most ``count``; waits up to ``block_ms`` for one).

        Taken at once if there are any; else after the next notification, or after the
        wait (the poll that covers a notification lost or never sent).
        """
        _one_partition(partition)
        taken = await self._take(consumer, count)
        if taken:
            return taken
        if self._listener is None:
            self._listener = self._db.listener(self._sql.channel)
        await self._listener.wait(block_ms / 1000)
        return await self._take(consumer, count)

    async def _take(self, consumer: str, count: int) -> list[WorkRow]:
        return _rows(await self._db.all(self._sql.take, (consumer, count)))

    async def reclaim(
        self, partition: int, consumer: str, idle_ms: int, count: int
    ) -> list[WorkRow]:
        """Take over rows whose heartbeat is ``idle_ms`` old (their worker died or gave up)."""
        _one_partition(partition)
        return _rows(await self._db.all(self._sql.reclaim, (consumer, idle_ms / 1000, count)))

    async def stale(self, partition: int, consumer: str, idle_ms: int, count: int) -> list[WorkRow]:
        """Other consumers' rows idle for ``idle_ms`` or more (oldest first), unclaimed."""
        _one_partition(partition)
        rows = await self._db.all(self._sql.stale, (consumer, idle_ms / 1000, count))
        return [WorkRow(0, b"%d" % row[0], str(row[1]), int(row[2])) for row in rows]

    async def claim(self, consumer: str, idle_ms: int, entries: Sequence[WorkRow]) -> list[WorkRow]:
        """Take over ``entries`` still idle for ``idle_ms`` (a heartbeat since keeps one)."""
        ids = [int(entry.entry_id) for entry in entries]
        return _rows(await self._db.all(self._sql.claim, (consumer, ids, idle_ms / 1000)))

    async def touch(self, consumer: str, entries: Sequence[WorkRow]) -> None:
        """Refresh the heartbeat of rows ``consumer`` is working on."""
        await self._db.run(self._sql.touch, (consumer, [int(e.entry_id) for e in entries]))

    async def ack(self, entry: WorkRow) -> None:
        """The row's work is done: nobody needs to take it again."""
        await self._db.run(self._sql.ack, (int(entry.entry_id),))

    async def move_due(self, partition: int, limit: int = 500) -> tuple[int, float | None]:
        """Move runs whose deadline passed into the queue.

        Returns:
            How many moved, and seconds until the next deadline (None: there is none).
        """
        _one_partition(partition)
        row = await self._db.one(self._sql.move_due, (limit,))
        if row is None:
            return 0, None
        moved, _, next_ms, now_ms = row
        return int(moved), None if next_ms is None else max(int(next_ms) - int(now_ms), 0) / 1000

    async def trim(self, partition: int) -> int:
        """Nothing to trim: a done row is deleted when it is acknowledged."""
        return 0

    async def pending(self, consumer: str | None = None) -> int:
        """How many rows are taken and not acknowledged (by ``consumer``, if named)."""
        row = await self._db.one(self._sql.pending, (consumer, consumer))
        return 0 if row is None else int(row[0])

    async def aclose(self) -> None:
        """Close the listening connection (the pool is the store's)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.aclose()


def _rows(rows: list[Row]) -> list[WorkRow]:
    return [WorkRow(0, b"%d" % row[0], str(row[1]), int(row[2])) for row in rows]


def _one_partition(partition: int) -> None:
    if partition != 0:
        raise InputError(f"the Postgres work queue has one partition (0), not {partition}")
