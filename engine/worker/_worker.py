"""A worker process's loop: take run work from the queue, drive each run until it is idle.

The unit of work is a run, not a step: an entry says "this run needs driving", and the
worker that takes it opens the run (taking its lease), steps it until nothing more can
happen — it finished, or waits on a human or a deadline — gives the lease back, records
the run's next deadline and only then acknowledges the entry. A run's steps therefore
stay on one worker while it moves (its state is in memory, no step re-reads it), and
many runs spread over all workers.

What makes it safe:

* **Commit exactly once.** Every commit checks the run's lease and fencing token in the
  store, so whichever worker holds the lease is the only one that can write; an entry
  reclaimed from a worker that is merely slow finds the lease held and is retried later.
* **Run at least once.** An entry is acknowledged only after its run is idle and its
  lease released. A worker that dies leaves its entries pending; their idle time grows
  (the heartbeat stopped); once an entry missed a few heartbeats and its run's lease is
  free (expired, or its holder provably died on this host) any worker takes it over, and
  after ``reclaim_after`` any worker takes it regardless (``XAUTOCLAIM``), then resumes
  the run from its last committed step. The action
  that was in flight runs again, with the same :attr:`ActionContext.idempotency_key`.
* **Nothing lost in between.** A second entry for a run this worker is driving (a reply
  landing while the drive ends) is looked at by the drive, or drives the run once more
  after it, before either entry is acknowledged.
* **Answers reach a busy run.** The drive is a :class:`~phasegraph.worker.RunDriver`'s
  over the run's mail in the queue (:class:`~phasegraph.worker._mail.QueueMailbox`): a
  reply posted for a run being driven here (its gate opened while other nodes work) is
  applied between two steps; a cancel request stops the drive at its last committed
  step, even in a long action, and commits the cancel. A run held elsewhere, whose lease
  was lost or whose store went away is tried again later, waiting longer each time.
* **A store outage is one line.** While the store is away every call fails; each one is
  retried or its run left for a reclaim, and the outage is logged once when it starts
  and once when it ends (see :mod:`phasegraph.worker._outage`), never as a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from phasegraph.api import Engine
from phasegraph.errors import (
    DefinitionUnavailableError,
    InputError,
    PhasegraphError,
    StoreUnavailableError,
)
from phasegraph.store._holder import holder_gone
from phasegraph.worker._driver import RunDriver
from phasegraph.worker._mail import QueueMailbox
from phasegraph.worker._outage import Outage
from phasegraph.worker._queue import QueueEntry, WorkQueue

__all__ = ["Worker", "WorkerOptions", "WorkerStats"]

_log = logging.getLogger("phasegraph.worker")

_TRIM_EVERY: Final = 60.0  # seconds between trims of acknowledged entries
_DUE_POLL_MAX: Final = 1.0  # seconds: a deadline set by another process is seen this soon
_BEAT_MAX: Final = 1.0  # seconds between heartbeats at most
_MISSED_BEATS: Final = 3  # an entry this many heartbeats silent lost its worker (or soon will)
_HAND_ON_PAUSE: Final = 1.0  # seconds before a run this worker cannot load is queued again


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How a worker takes and keeps work.

    Attributes:
        concurrency: Runs driven at once.
        reclaim_after: Seconds an entry may go without a heartbeat before another worker
            takes it over even though its run's lease is held (a run whose lease is free
            moves sooner, after a few missed heartbeats). Keep it at least the lease
            length where workers run on several hosts: a dead holder on another host
            keeps its lease until it expires.
        block: Seconds one read waits for new entries.
    """

    concurrency: int = 16
    reclaim_after: float = 30.0
    block: float = 1.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise InputError(f"concurrency must be at least 1, not {self.concurrency}")
        if not self.reclaim_after > 0:
            raise InputError(f"reclaim_after must be positive, not {self.reclaim_after}")
        if not self.block > 0:
            raise InputError(f"block must be positive, not {self.block}")


@dataclass(slots=True)
class WorkerStats:
    """What a worker did so far (also logged when it stops).

    Attributes:
        drives: Runs driven until idle.
        steps: Steps committed.
        reclaimed: Entries taken over from other workers.
        deadlines: Deadlines this worker moved into the queue.
    """

    drives: int = 0
    steps: int = 0
    reclaimed: int = 0
    deadlines: int = 0


@dataclass(slots=True)
class _Active:
    """A run being driven here and the entries it answers."""

    entries: list[QueueEntry] = field(default_factory=list)
    acked: int = 0  # entries[:acked] are acknowledged
    again: bool = False  # an entry came once the drive had ended: drive once more


class _HandOn(Exception):  # how _serve says "hand this run on" (not an error of its own)
    """The run's definition does not load here: its entries, to acknowledge once handed on."""

    def __init__(self, entries: Sequence[QueueEntry], why: DefinitionUnavailableError) -> None:
        super().__init__(str(why))
        self.entries = list(entries)
        self.why = why


@final
class Worker:
    """Drives runs taken from a :class:`WorkQueue` until stopped.

    Args:
        engine: The engine (and store) runs are driven with.
        queue: Where work comes from.
        name: The consumer name in the group (unique per live worker).
        options: Concurrency and timing.
    """

    def __init__(
        self,
        engine: Engine,
        queue: WorkQueue,
        *,
        name: str,
        options: WorkerOptions | None = None,
    ) -> None:
        self._queue = queue
        self._name = name
        self._options = options or WorkerOptions()
        self._driver = RunDriver(engine, QueueMailbox(queue), log=_log, hand_off=True)
        self._store = engine.store
        self._active: dict[str, _Active] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._room = asyncio.Event()  # set whenever a drive ends (a slot may be free)
        self._outage = Outage(_log)  # the store away: said once, not once per failed call
        self._unloadable: set[str] = set()  # runs left for others: said once each
        self.stats = WorkerStats()

    @property
    def name(self) -> str:
        """The consumer name."""
        return self._name

    async def run(self, stop: asyncio.Event, started: Callable[[int], None] | None = None) -> None:
        """Take and drive work until ``stop`` is set, then stop every drive.

        Drives are cut at their last committed step and their runs handed back to the
        queue, so another worker continues them at once.

        Args:
            stop: Set to stop.
            started: Called with the queue's partition count once the store has answered
                (a store away when the worker starts is an outage it waits out first).
        """
        partitions = await self._partitions(stop)
        if started is not None and not stop.is_set():
            started(partitions)
        loops = [
            *(self._read(p, stop) for p in range(partitions)),
            self._heartbeat(stop),
            self._deadlines(partitions, stop),
        ]
        background = [asyncio.create_task(loop) for loop in loops]
        try:
            await stop.wait()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._hand_back()
            await self._driver.aclose()

    async def _partitions(self, stop: asyncio.Event) -> int:
        """The queue's partitions, asked until the store answers (it may be away already)."""
        while True:
            try:
                count = await self._queue.partitions()
            except StoreUnavailableError as exc:
                self._outage.failed(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
                if stop.is_set():
                    return 0
                continue
            self._outage.answered()
            return count

    # -- taking work --------------------------------------------------------------------

    async def _read(self, partition: int, stop: asyncio.Event) -> None:
        options = self._options
        idle_ms = round(options.reclaim_after * 1000)
        block_ms = round(options.block * 1000)
        next_reclaim = 0.0
        while not stop.is_set():
            free = await self._wait_for_room()
            try:
                entries: Sequence[QueueEntry] = ()
                if time.monotonic() >= next_reclaim:
                    next_reclaim = time.monotonic() + options.reclaim_after / 4
                    entries = await self._queue.reclaim(partition, self._name, idle_ms, free)
                    self.stats.reclaimed += len(entries)
                if not entries:
                    entries = await self._unleased(partition, free)
                    self.stats.reclaimed += len(entries)
                if not entries:
                    entries = await self._queue.take(partition, self._name, free, block_ms)
            except StoreUnavailableError as exc:
                self._outage.failed(exc)
                await asyncio.sleep(1.0)
                continue
            except Exception as exc:  # any queue's own error: go on
                _log.warning("cannot read work (partition %d): %s; retrying", partition, exc)
                await asyncio.sleep(1.0)
                continue
            self._outage.answered()
            for entry in entries:
                self._start(entry)

    async def _unleased(self, partition: int, count: int) -> Sequence[QueueEntry]:
        """Take over entries that missed a heartbeat and whose run's lease is free.

        Their worker died (or is between two drives): the lease, not a fixed wait, says
        when the run may move, so a dead worker's run moves once its lease expired, or at
        once when its holder provably died on this host. A claim that races a live
        worker costs nothing but a retry: the run's lease decides who commits.
        """
        missed_ms = round(_MISSED_BEATS * self._beat() * 1000)
        stale = await self._queue.stale(partition, self._name, missed_ms, count)
        free = []
        for entry in stale:
            holder = await self._store.holder(entry.run_id)
            if holder is None or holder_gone(holder):
                free.append(entry)
        return await self._queue.claim(self._name, missed_ms, free) if free else ()

    async def _wait_for_room(self) -> int:
        """How many more runs may start now (waits until at least one may)."""
        while len(self._tasks) >= self._options.concurrency:
            self._room.clear()
            await self._room.wait()
        return self._options.concurrency - len(self._tasks)

    def _start(self, entry: QueueEntry) -> None:
        active = self._active.get(entry.run_id)
        if active is not None:  # already driving it here: the drive looks at its mail
            active.entries.append(entry)
            active.again = active.again or not self._driver.notify(entry.run_id)
            return
        self._active[entry.run_id] = _Active([entry])
        name = f"phasegraph-worker:{entry.run_id}"
        task = asyncio.create_task(self._serve_or_leave(entry.run_id), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("worker task %s failed", task.get_name(), exc_info=task.exception())
        self._room.set()

    async def _serve_or_leave(self, run_id: str) -> None:
        """Serve the run; a queue call that fails leaves its entries for a reclaim."""
        try:
            await self._serve(run_id)
        except _HandOn as handing:
            await self._hand_on(run_id, handing.entries, handing.why)
        except StoreUnavailableError as exc:
            # Not acknowledged: once the store is back, a worker reclaims the entries.
            self._outage.failed(exc)
            _log.info("run %s left for a reclaim: %s", run_id, exc)
        except PhasegraphError as exc:  # the queue refused a command: reclaimed later too
            _log.error("run %s left for a reclaim: %s", run_id, exc)

    async def _hand_on(
        self, run_id: str, entries: Sequence[QueueEntry], exc: DefinitionUnavailableError
    ) -> None:
        """Leave a run whose definition does not load here for the other workers.

        Said once per run (a worker that keeps taking it back says nothing more); the run
        is queued again after a pause, so that this worker does not spin on it alone, and
        only then are its entries acknowledged (a worker that dies between the two leaves
        one entry more, never none).
        """
        if run_id not in self._unloadable:
            self._unloadable.add(run_id)
            _log.warning("run %s left for another worker: %s", run_id, exc)
        await asyncio.sleep(_HAND_ON_PAUSE)
        await self._queue.enqueue(run_id)  # a store away: the entries are reclaimed later
        for entry in entries:
            await self._queue.ack(entry)

    async def _serve(self, run_id: str) -> None:
        """Drive a run until idle (again if an entry came after the drive), then acknowledge.

        An entry that comes during the drive is dealt with by it (the driver is notified);
        one that comes after it ended, by one more drive before it is acknowledged.
        """
        active = self._active[run_id]
        try:
            while True:
                active.again = False
                try:
                    driven = await self._driver.drive(run_id)
                except DefinitionUnavailableError as exc:
                    raise _HandOn(active.entries[active.acked :], exc) from None
                self.stats.drives += 1
                self.stats.steps += driven.steps
                if (state := driven.state) is not None:
                    _log.info(
                        "run %s: %d steps, now %s at step %d",
                        run_id,
                        driven.steps,
                        state.status,
                        state.seq,
                    )
                while active.acked < len(active.entries) and not active.again:
                    await self._queue.ack(active.entries[active.acked])
                    active.acked += 1
                if not active.again:
                    break
        finally:
            del self._active[run_id]

    # -- keeping work -------------------------------------------------------------------

    def _beat(self) -> float:
        """Seconds between heartbeats: often, so a silent entry is noticed soon."""
        return min(self._options.reclaim_after / 3, _BEAT_MAX)

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Keep the entries being worked on from looking abandoned."""
        every = self._beat()
        while not stop.is_set():
            await asyncio.sleep(every)
            entries = [e for a in self._active.values() for e in a.entries[a.acked :]]
            if entries:
                try:
                    await self._queue.touch(self._name, entries)
                except StoreUnavailableError as exc:  # a missed beat is retried next time
                    self._outage.failed(exc)
                except Exception:  # likewise (any queue's own error)
                    pass

    async def _deadlines(self, partitions: int, stop: asyncio.Event) -> None:
        """Move runs whose deadline passed into the queue; trim what every worker is done with."""
        next_trim = time.monotonic() + _TRIM_EVERY
        while not stop.is_set():
            wait = _DUE_POLL_MAX
            try:
                for partition in range(partitions):
                    moved, following = await self._queue.move_due(partition)
                    self.stats.deadlines += moved
                    if following is not None:
                        wait = min(wait, following)
                if time.monotonic() >= next_trim:
                    next_trim = time.monotonic() + _TRIM_EVERY
                    for partition in range(partitions):
                        await self._queue.trim(partition)
            except StoreUnavailableError as exc:  # try again shortly
                self._outage.failed(exc)
            except Exception as exc:  # any queue's own error: try again shortly
                _log.warning("cannot move due runs: %s", exc)
            else:
                self._outage.answered()
            await asyncio.sleep(max(wait, 0.01))

    async def _hand_back(self) -> None:
        """Stop every drive at its last committed step and requeue its run at once."""
        held = {run_id: a.entries[a.acked :] for run_id, a in self._active.items()}
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for run_id, entries in held.items():
            with contextlib.suppress(Exception):  # else the entries are reclaimed later
                await self._queue.enqueue(run_id)
                for entry in entries:
                    await self._queue.ack(entry)
