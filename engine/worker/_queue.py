"""The work queue as a worker sees it: the protocol, and finding the queue on a store.

The queue itself lives with its store (:mod:`phasegraph.store._redis_queue`,
:mod:`phasegraph.store._postgres_queue`); the
worker loop (:mod:`phasegraph.worker._worker`) and the run mail
(:mod:`phasegraph.worker._mail`) both speak to it through :class:`WorkQueue`, which lives
here so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from phasegraph.errors import InputError
from phasegraph.store import Store

__all__ = ["QueueEntry", "WorkQueue", "has_work_queue", "work_queue_of"]


class WorkQueue(Protocol):
    """What a worker needs of the queue (the Redis and Postgres stores' queues have it all)."""

    async def partitions(self) -> int:
        """How many partitions there are."""
        ...

    async def enqueue(self, run_id: str) -> None:
        """Ask for a run to be driven."""
        ...

    async def queued(self, run_id: str) -> bool:
        """Whether a run has an entry no worker has finished."""
        ...

    async def post_reply(self, run_id: str, reply: Mapping[str, Any]) -> None:
        """Hand a reply to the worker driving a run."""
        ...

    async def replies(self, run_id: str) -> list[dict[str, Any]]:
        """Replies posted to a run."""
        ...

    async def replies_done(self, run_id: str, count: int) -> None:
        """Forget replies dealt with."""
        ...

    async def request_cancel(
        self, run_id: str, reason: str, *, actor: Mapping[str, Any] | None = None
    ) -> None:
        """Ask the worker driving a run to cancel it (``actor``: who asks, as a mapping)."""
        ...

    async def cancel_requested(self, run_id: str) -> dict[str, Any] | None:
        """A pending cancel request: its ``reason`` and ``actor`` (``None``: nobody named)."""
        ...

    async def cancel_done(self, run_id: str) -> None:
        """Drop a cancel request."""
        ...

    async def schedule(self, run_id: str, due_ms: int) -> None:
        """Drive a run once a time passes."""
        ...

    async def unschedule(self, run_id: str) -> None:
        """Forget a run's deadline."""
        ...

    async def take(
        self, partition: int, consumer: str, count: int, block_ms: int
    ) -> Sequence[QueueEntry]:
        """New entries."""
        ...

    async def reclaim(
        self, partition: int, consumer: str, idle_ms: int, count: int
    ) -> Sequence[QueueEntry]:
        """Entries other consumers left idle."""
        ...

    async def stale(
        self, partition: int, consumer: str, idle_ms: int, count: int
    ) -> Sequence[QueueEntry]:
        """Other consumers' entries idle for a while (not claimed by asking)."""
        ...

    async def claim(
        self, consumer: str, idle_ms: int, entries: Sequence[QueueEntry]
    ) -> Sequence[QueueEntry]:
        """Take over entries still that idle."""
        ...

    async def touch(self, consumer: str, entries: Sequence[QueueEntry]) -> None:
        """Heartbeat for entries being worked on."""
        ...

    async def ack(self, entry: QueueEntry) -> None:
        """Done with an entry."""
        ...

    async def move_due(self, partition: int, limit: int = 500) -> tuple[int, float | None]:
        """Move due runs into the stream."""
        ...

    async def trim(self, partition: int) -> int:
        """Drop acknowledged entries."""
        ...

    async def aclose(self) -> None:
        """Close connections."""
        ...


class QueueEntry(Protocol):
    """One entry of the queue: which run to drive, and where the entry is."""

    @property
    def partition(self) -> int:
        """Its partition."""
        ...

    @property
    def entry_id(self) -> bytes:
        """Its stream id."""
        ...

    @property
    def run_id(self) -> str:
        """The run to drive."""
        ...


def has_work_queue(store: Store) -> bool:
    """Whether workers can share runs through ``store`` (Redis and Postgres stores can)."""
    return getattr(store, "work_queue", None) is not None


def work_queue_of(store: Store, *, partitions: int = 1) -> WorkQueue:
    """The work queue on ``store``'s server.

    Raises:
        InputError: The store has no work queue (only Redis and Postgres stores have one).
    """
    make = getattr(store, "work_queue", None)
    if make is None:
        raise InputError(
            f"workers share runs through Redis or Postgres: {type(store).__name__} has no "
            "work queue (use --store redis://HOST:PORT/DB or postgresql://HOST/DATABASE)"
        )
    queue: WorkQueue = make(partitions=partitions)
    return queue
