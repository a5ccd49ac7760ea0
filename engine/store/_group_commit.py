"""Group commit for the SQLite store: commits queued together share one transaction.

Why: a transaction has a fixed cost (the write lock, the WAL frames of the pages every
commit touches, and with ``synchronous=full`` an fsync) that concurrent runs can share,
and handing each commit to the worker thread costs more than the transaction itself
(measured: a hop of ~95 µs against a ~50 µs transaction).

How:

* :meth:`GroupCommit.submit` queues the commit with a future and, for the first commit
  of a batch, schedules one flush with ``call_soon``. Every commit queued before the
  flush runs — by other runs stepping in the same event-loop turn, or while a batch is
  being written on the worker thread — goes into the same transaction.
* The flush first tries to write the batch at once on the event-loop thread (``now``):
  that succeeds when the connection is free and SQLite grants the write lock without
  waiting, the common case, and costs no thread hop.
* Otherwise (another process holds the write lock, the worker thread is reading, no
  connection is open yet) the batch goes to the worker thread (``wait``), which waits
  for the lock. Commits queued meanwhile go into the next transaction.
* Each commit learns its own outcome: the writer returns one per commit, ``None`` or the
  refusal (lease lost, head moved) meant for that caller alone; the others still commit.
  An error of the transaction itself fails every commit of the batch, none written.

A caller whose task is cancelled leaves its commit in the batch (it is written, the
result dropped): commits are idempotent, so retrying one is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, final

from phasegraph.store._thread_worker import ThreadWorker

__all__ = ["GroupCommit", "Outcomes"]

T = TypeVar("T")
Outcomes = list[BaseException | None]
"""One outcome per commit of a batch, in order: ``None`` (written) or its refusal."""


@final
class GroupCommit(Generic[T]):
    """Batches submitted items and writes each batch in one transaction.

    Args:
        worker: The thread that may wait for SQLite's write lock.
        now: Writes a batch at once on the calling thread, or returns ``None`` if it
            could not begin without waiting (nothing written).
        wait: Writes a batch, waiting for the lock as long as it must (worker thread).
    """

    def __init__(
        self,
        worker: ThreadWorker,
        now: Callable[[Sequence[T]], Outcomes | None],
        wait: Callable[[Sequence[T]], Outcomes],
    ) -> None:
        self._worker = worker
        self._now = now
        self._wait = wait
        self._queue: list[tuple[T, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # set while a batch is open
        # The batch being written on the worker thread (a task the loop holds only weakly).
        self._on_worker: asyncio.Task[None] | None = None
        self._idle: list[asyncio.Future[None]] = []

    async def submit(self, item: T, *, alone: bool = False) -> None:
        """Write ``item`` in the next transaction and return once it is committed.

        Args:
            item: What to write.
            alone: No other writer is likely to submit before the next flush (one run
                writes through this store): write at once if that needs no waiting,
                instead of waiting an event-loop turn for company (~17 µs measured).

        Raises:
            BaseException: The item's refusal, or the transaction's error.
        """
        if alone and self._loop is None:
            outcomes = self._now((item,))
            if outcomes is not None:
                if outcomes[0] is not None:
                    raise outcomes[0]
                return
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            # A batch is open on another event loop (another thread): this one goes on
            # its own through the worker, which serialises it with that batch's writes.
            (outcome,) = await self._worker.call(self._wait, (item,))
            if outcome is not None:
                raise outcome
            return
        future = loop.create_future()
        self._queue.append((item, future))
        if self._loop is None:
            self._loop = loop
            loop.call_soon(self._flush)
        await future

    async def idle(self) -> None:
        """Wait until every submitted item has been written (or refused)."""
        if self._loop is not asyncio.get_running_loop():
            return  # nothing open here (a batch of another loop settles on that loop)
        future = self._loop.create_future()
        self._idle.append(future)
        await future

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        items = [item for item, _ in batch]
        try:
            outcomes = self._now(items)
        except BaseException as exc:  # the transaction failed: nothing of it was written
            _settle(batch, [exc] * len(batch))
            self._next()
            return
        if outcomes is None:
            loop = asyncio.get_running_loop()
            self._on_worker = loop.create_task(self._flush_on_worker(batch, items))
            return
        _settle(batch, outcomes)
        self._next()

    async def _flush_on_worker(
        self, batch: list[tuple[T, asyncio.Future[None]]], items: list[T]
    ) -> None:
        try:
            outcomes: Outcomes = await self._worker.call(self._wait, items)
        except BaseException as exc:
            outcomes = [exc] * len(batch)
        self._on_worker = None
        _settle(batch, outcomes)
        self._next()

    def _next(self) -> None:
        """Flush what queued meanwhile, or close the batch and wake :meth:`idle` waiters."""
        if self._queue:
            asyncio.get_running_loop().call_soon(self._flush)
            return
        self._loop = None
        idle, self._idle = self._idle, []
        for future in idle:
            if not future.done():
                future.set_result(None)


def _settle(batch: Sequence[tuple[object, asyncio.Future[None]]], outcomes: Outcomes) -> None:
    for (_, future), outcome in zip(batch, outcomes, strict=True):
        if future.done():
            continue  # its caller was cancelled; the commit was still written (or refused)
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)
