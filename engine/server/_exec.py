"""Runs executed by the HTTP server: background tasks under one concurrency limit.

The :class:`Executor` owns every task the server starts for a run — one *driver* per run
being stepped, one *timer* per waiting run with a review deadline — and cancels and awaits
them all on :meth:`Executor.aclose`. Cancelling a driver leaves the run at its last
committed step (the interpreter never commits half a step), so the next server resumes it.

All work on one run goes through its driver: a reply is queued in the run's mailbox and
applied between two steps, so a run is never opened twice by this process, and the
interpreter's single-writer lease only ever refuses *other* processes.

In front of workers (``ExecutorOptions.queue`` set, ``phasegraph serve --queue``) the
server drives nothing itself: a new run's first step is committed, a reply's step too,
and the run goes into the store's work queue for the ``phasegraph worker`` processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, final

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.errors import (
    InputError,
    LeaseHeldError,
    LeaseLostError,
    PhasegraphError,
    RunStateError,
    StoreUnavailableError,
)
from phasegraph.model import RunState, RunStatus
from phasegraph.run import PreparedGraph, Run
from phasegraph.store.base import RunMeta
from phasegraph.worker import WorkQueue, cancel_by_worker, post_reply, reply_applied

__all__ = ["Executor", "ExecutorOptions"]

_log = logging.getLogger("phasegraph.server")

_DEADLINE_SLACK: Final = timedelta(milliseconds=20)
"""Wake a little after a deadline, so the interpreter sees it as passed."""
_PAGE: Final = 500
_MAX_ADOPT_WAIT: Final = 60.0  # seconds: the longest wait before a refused run is tried again


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorOptions:
    """How the server executes runs.

    Attributes:
        max_runs: How many runs may be stepped at once (others queue for a slot).
        adopt_interval: Seconds between attempts to take over a ``running`` run whose
            lease another process (live, or dead with a lease not yet expired) holds.
        queue: Hand runs to the workers through this queue instead of driving them here
            (the caller closes it).
    """

    max_runs: int = 64
    adopt_interval: float = 1.0
    queue: WorkQueue | None = None

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise InputError(f"max_runs must be at least 1, not {self.max_runs}")
        if not self.adopt_interval > 0:
            raise InputError(f"adopt_interval must be positive, not {self.adopt_interval}")


@dataclass(frozen=True, slots=True)
class _Reply:
    """A reply waiting for the run's driver; ``done`` receives the state after it."""

    interrupt_id: str
    result: ActionResult
    done: asyncio.Future[RunState]


@final
class Executor:
    """Drives the server's runs as owned asyncio tasks.

    Args:
        engine: The engine whose store holds the runs.
        options: Concurrency limit and takeover interval.
    """

    def __init__(self, engine: Engine, options: ExecutorOptions | None = None) -> None:
        self._engine = engine
        self._options = options or ExecutorOptions()
        self._slots = asyncio.Semaphore(self._options.max_runs)
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._mail: dict[str, list[_Reply]] = {}
        self._graphs: dict[str, PreparedGraph] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._held: set[str] = set()
        self._closing = False
        self.recovered = asyncio.Event()
        """Set once the runs found in the store at start-up were taken care of."""

    # -- public operations ----------------------------------------------------------

    def start(self) -> None:
        """Begin recovery: resume ``running`` runs, arm deadlines of waiting ones."""
        if self._options.queue is not None:
            self.recovered.set()  # the workers own every run, the ones found now too
            return
        task = asyncio.create_task(self._recover(), name="phasegraph-server:recover")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)

    async def create(
        self, graph: PreparedGraph, run_input: Mapping[str, Any], run_id: str | None
    ) -> RunState:
        """Create a run (its seq 0 is committed on return) and drive it in the background.

        Raises:
            InputError: The input does not match the graph's input schema.
            SequenceConflictError: A run with that id exists.
        """
        async with self._engine.start(graph, run_input, run_id=run_id) as run:
            state = run.state
        if self._options.queue is not None:
            await self._options.queue.enqueue(state.run_id)
            return state
        self._graphs[state.run_id] = graph
        self.submit(state.run_id)
        return state

    async def reply(self, run_id: str, interrupt_id: str, result: ActionResult) -> RunState:
        """Answer a pending interrupt; return the state right after the reply's step.

        The run then goes on in the background.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run has no such pending interrupt.
            IllegalTriggerError: The trigger is not legal in the waiting node's state.
            LeaseHeldError: Another process is driving the run.
        """
        queue = self._options.queue
        if queue is not None:
            try:
                async with self._engine.open(run_id) as run:
                    await run.reply(interrupt_id, result)
                    state = run.state
            except LeaseHeldError:
                if not await queue.queued(run_id):
                    raise
                # A worker drives the run (a gate opened beside running nodes): it applies
                # the reply between two steps, as this server would.
                before = await post_reply(self._engine, queue, run_id, interrupt_id, result)
                return await reply_applied(self._engine, run_id, interrupt_id, before.seq)
            await queue.enqueue(run_id)
            return state
        if self._closing or run_id in self._held:
            why = "is being cancelled" if run_id in self._held else "cannot be answered now"
            raise RunStateError(f"run {run_id!r} {why}; the server is busy with it", run_id=run_id)
        done: asyncio.Future[RunState] = asyncio.get_running_loop().create_future()
        self._mail.setdefault(run_id, []).append(_Reply(interrupt_id, result, done))
        self.submit(run_id)
        return await done

    async def resume(self, run_id: str) -> RunState:
        """Drive an unfinished run in the background; return its head state.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run already finished.
        """
        state = await self._engine.get(run_id)
        if state.status.terminal:
            raise RunStateError(
                f"run {run_id!r} already {state.status}; nothing to resume", run_id=run_id
            )
        if self._options.queue is not None:
            await self._options.queue.enqueue(run_id)
            return state
        self.submit(run_id)
        return state

    async def cancel(self, run_id: str, reason: str) -> RunState:
        """Stop driving the run (at its last committed step) and commit it as cancelled.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run already finished.
            LeaseHeldError: Another process is driving the run.
        """
        queue = self._options.queue
        if queue is not None:
            try:
                state = await self._engine.cancel(run_id, reason)
            except LeaseHeldError:
                if not await queue.queued(run_id):
                    raise
                state = await cancel_by_worker(self._engine, queue, run_id, reason)
            await queue.unschedule(run_id)  # its deadline has nothing to fire
            return state
        self._held.add(run_id)  # no driver may start while the cancel is under way
        driver, timer = self._drivers.get(run_id), self._timers.get(run_id)
        try:
            if driver is not None:
                driver.cancel()
                await asyncio.gather(driver, return_exceptions=True)
            self._disarm(run_id)
            state = await self._engine.cancel(run_id, reason, graph=self._graphs.get(run_id))
        except PhasegraphError:
            self._held.discard(run_id)
            if driver is not None or timer is not None:
                self.submit(run_id)  # refused: go on with what was stopped or disarmed
            raise
        finally:
            self._held.discard(run_id)
        self._graphs.pop(run_id, None)
        return state

    async def fork(
        self, run_id: str, at_seq: int | None, patch: Mapping[str, Any] | None
    ) -> RunState:
        """Fork a run at ``at_seq`` with ``patch``; drive the fork if it is unfinished."""
        new_id = await self._engine.fork(run_id, at_seq, patch)
        state = await self._engine.get(new_id)
        if self._options.queue is not None:
            if state.status is RunStatus.RUNNING:
                await self._options.queue.enqueue(new_id)
            return state
        if state.status is RunStatus.RUNNING:
            self.submit(new_id)
        else:
            self._settled(new_id, state)
        return state

    def submit(self, run_id: str) -> None:
        """Drive the run in the background, unless this server is already driving it."""
        if self._closing or run_id in self._drivers or run_id in self._held:
            return
        self._disarm(run_id)
        self._drivers[run_id] = asyncio.create_task(
            self._drive(run_id), name=f"phasegraph-server:drive:{run_id}"
        )

    def driving(self, run_id: str) -> bool:
        """Whether this server is stepping (or about to step) the run."""
        return run_id in self._drivers

    def stats(self) -> dict[str, int]:
        """Counts for the readiness endpoint."""
        return {
            "driving": len(self._drivers),
            "deadlines": len(self._timers),
            "max_runs": self._options.max_runs,
        }

    async def aclose(self) -> None:
        """Cancel every task at its last committed step and wait for them (idempotent)."""
        self._closing = True
        tasks = [*self._drivers.values(), *self._timers.values(), *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._timers.clear()

    # -- driving --------------------------------------------------------------------

    async def _drive(self, run_id: str) -> None:
        try:
            state = await self._drive_until_idle(run_id)
            if state is not None:
                self._settled(run_id, state)
        except Exception:  # a background task has nobody to raise to: log it
            _log.exception("driving run %s failed", run_id)
        finally:
            self._drivers.pop(run_id, None)
            self._fail_mail(run_id, "the server stopped driving the run before the reply")

    async def _drive_until_idle(self, run_id: str) -> RunState | None:
        """Step the run until nothing more can happen and no reply is queued.

        A run held elsewhere, taken over, or stopped because the store went away is
        tried again later, each time waiting twice as long (up to a minute), with a line
        in the log: never in a hot loop.
        """
        refusals = 0
        while True:
            try:
                state = await self._drive_once(run_id)
            except (LeaseHeldError, LeaseLostError, StoreUnavailableError) as exc:
                self._fail_mail(run_id, exc)
                delay = min(self._options.adopt_interval * 2**refusals, _MAX_ADOPT_WAIT)
                refusals += 1
                log = _log.info if isinstance(exc, LeaseHeldError) else _log.warning
                log(
                    "run %s not driven here for now (%s); trying again in %.1f s",
                    run_id,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                if not await self._worth_retrying(run_id):
                    return None
                continue
            except PhasegraphError as exc:
                self._fail_mail(run_id, exc)  # e.g. a reply to an unknown run: the client hears
                _log.info("run %s not driven: %s", run_id, exc)
                return None
            # No await between this check and the caller's clean-up: a reply queued
            # later finds no driver and starts a new one.
            if not self._mail.get(run_id):
                return state

    async def _drive_once(self, run_id: str) -> RunState:
        await self._engine.leases.room()  # no more runs than the keeper keeps renewed
        async with self._slots, self._engine.open(run_id, graph=self._graphs.get(run_id)) as run:
            while True:
                await self._deliver(run)
                if await run.next() is None and not self._mail.get(run_id):
                    return run.state

    async def _deliver(self, run: Run) -> None:
        """Apply the queued replies, between two steps."""
        batch = self._mail.pop(run.run_id, [])
        try:
            for reply in batch:
                if reply.done.done():  # the client went away: the reply was withdrawn
                    continue
                try:
                    await run.reply(reply.interrupt_id, reply.result)
                except PhasegraphError as exc:
                    reply.done.set_exception(exc)
                else:
                    reply.done.set_result(run.state)
        finally:
            _fail(batch, RunStateError("the reply was interrupted", run_id=run.run_id))

    async def _worth_retrying(self, run_id: str) -> bool:
        """After a refusal: retry a run still ``running``; re-arm a waiting one's deadline."""
        try:
            state = await self._engine.get(run_id)
        except StoreUnavailableError:
            return True
        except PhasegraphError as exc:
            _log.warning("run %s not driven: %s", run_id, exc)
            return False
        if state.status is RunStatus.RUNNING:
            return True
        self._settled(run_id, state)
        return False

    def _fail_mail(self, run_id: str, why: PhasegraphError | str) -> None:
        error = why if isinstance(why, PhasegraphError) else RunStateError(why, run_id=run_id)
        _fail(self._mail.pop(run_id, []), error)

    # -- deadlines ------------------------------------------------------------------

    def _settled(self, run_id: str, state: RunState) -> None:
        """The run stopped moving here: forget it if finished, else arm its deadline."""
        if state.status.terminal:
            self._graphs.pop(run_id, None)
            self._disarm(run_id)
            return
        deadlines = [i.deadline for i in state.interrupts.values() if i.deadline is not None]
        if not deadlines or self._closing:
            return
        due = min(deadlines) + _DEADLINE_SLACK - self._engine.clock.now()
        self._disarm(run_id)
        self._timers[run_id] = asyncio.create_task(
            self._fire(run_id, max(due.total_seconds(), 0.0)),
            name=f"phasegraph-server:deadline:{run_id}",
        )

    async def _fire(self, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timers.pop(run_id, None)  # before submit, which would cancel this very task
        self.submit(run_id)  # the interpreter fires `timeout` for every passed deadline

    def _disarm(self, run_id: str) -> None:
        timer = self._timers.pop(run_id, None)
        if timer is not None:
            timer.cancel()

    # -- start-up -------------------------------------------------------------------

    async def _recover(self) -> None:
        """Resume ``running`` runs and arm the deadlines of waiting and parked ones."""
        while True:
            try:
                running = await self._run_ids(RunStatus.RUNNING)
                held = await self._run_ids(RunStatus.WAITING) + await self._run_ids(
                    RunStatus.PARKED
                )
                break
            except PhasegraphError as exc:
                _log.warning("cannot list the runs to recover (%s); retrying", exc)
                await asyncio.sleep(self._options.adopt_interval)
        for run_id in running:
            self.submit(run_id)
        for run_id in held:
            with contextlib.suppress(PhasegraphError):
                self._settled(run_id, await self._engine.get(run_id))
        _log.info("recovered %d running and %d waiting runs", len(running), len(held))
        self.recovered.set()

    async def _run_ids(self, status: RunStatus) -> list[str]:
        pages: list[RunMeta] = []
        while True:
            page = await self._engine.list_runs(status=status, limit=_PAGE, offset=len(pages))
            pages += page
            if len(page) < _PAGE:
                break
        for meta in pages:
            if meta.unreadable:
                _log.warning("run %s is left alone: %s", meta.run_id, meta.unreadable)
        return [meta.run_id for meta in pages if not meta.unreadable]


def _fail(replies: list[_Reply], error: PhasegraphError) -> None:
    for reply in replies:
        if not reply.done.done():
            reply.done.set_exception(error)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("server task %s failed", task.get_name(), exc_info=task.exception())
