"""Worker processes: drive runs taken from the store's work queue, on any number of hosts.

One run driver (``_driver``) drives a run until it is idle, for a worker and for the
server, over a mailbox (``_local_mail`` in process, the queue's for workers); it
launches and answers child runs (``_children``), and :func:`drive_locally` drives a run
and its child runs in one process.
``phasegraph worker --store redis://...`` runs a :class:`Worker`; ``run --detach``, the
server and the answering commands put work in the queue (see
:mod:`phasegraph.store._redis_queue` for the keys and the guarantee). May import
:mod:`phasegraph.api` and everything below it.
"""

from __future__ import annotations

from phasegraph.worker._local import drive_locally
from phasegraph.worker._queue import QueueEntry, WorkQueue, has_work_queue, work_queue_of
from phasegraph.worker._worker import Worker, WorkerOptions, WorkerStats

__all__ = [
    "QueueEntry",
    "WorkQueue",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "drive_locally",
    "has_work_queue",
    "work_queue_of",
]
