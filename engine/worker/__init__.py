"""Worker processes: drive runs taken from the store's work queue, on any number of hosts.

``phasegraph worker --store redis://...`` runs a :class:`Worker`; ``run --detach``, the
server and the answering commands put work in the queue (see
:mod:`phasegraph.store._redis_queue` for the keys and the guarantee). May import
:mod:`phasegraph.api` and everything below it.
"""

from __future__ import annotations

from phasegraph.worker._mail import cancel_by_worker, post_reply, reply_applied
from phasegraph.worker._worker import (
    QueueEntry,
    Worker,
    WorkerOptions,
    WorkerStats,
    WorkQueue,
    has_work_queue,
    work_queue_of,
)

__all__ = [
    "QueueEntry",
    "WorkQueue",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "cancel_by_worker",
    "has_work_queue",
    "post_reply",
    "reply_applied",
    "work_queue_of",
]
