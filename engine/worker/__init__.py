"""Worker processes: drive runs taken from the store's work queue, on any number of hosts.

One :class:`RunDriver` drives a run until it is idle, for a worker and for the server,
over a :class:`Mailbox` (:class:`LocalMailbox` in process, the queue's for workers).
``phasegraph worker --store redis://...`` runs a :class:`Worker`; ``run --detach``, the
server and the answering commands put work in the queue (see
:mod:`phasegraph.store._redis_queue` for the keys and the guarantee). May import
:mod:`phasegraph.api` and everything below it.
"""

from __future__ import annotations

from phasegraph.worker._driver import Driven, Mailbox, Outcome, Reply, RunDriver
from phasegraph.worker._local_mail import LocalMailbox
from phasegraph.worker._mail import cancel_by_worker, post_reply, reply_applied
from phasegraph.worker._queue import QueueEntry, WorkQueue, has_work_queue, work_queue_of
from phasegraph.worker._worker import Worker, WorkerOptions, WorkerStats

__all__ = [
    "Driven",
    "LocalMailbox",
    "Mailbox",
    "Outcome",
    "QueueEntry",
    "Reply",
    "RunDriver",
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
