"""Runs executed by the HTTP server: background tasks under one concurrency limit.

The :class:`Executor` owns every task the server starts for a run — one *driver* per run
being stepped; its :class:`~phasegraph.worker.LocalMailbox` owns a *timer* per waiting
run with a review deadline — and cancels and awaits them all on :meth:`Executor.aclose`.
Cancelling a driver leaves the run at its last committed step (the interpreter never
commits half a step), so the next server resumes it.

All work on one run goes through its drive (a :class:`~phasegraph.worker.RunDriver`'s,
as in the workers): a reply or a cancel is posted to the run's in-process mailbox and
acted on between two steps, so a run is never opened twice by this process, and the
interpreter's single-writer lease only ever refuses *other* processes. A run refused
(held elsewhere, its lease lost, the store away) is tried again later, the wait doubling
from ``adopt_interval`` up to a minute, with a line in the log each time.

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
from typing import Any, Final, final

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.errors import InputError, LeaseHeldError, PhasegraphError, RunStateError
from phasegraph.model import Actor, RunState, RunStatus
from phasegraph.run import PreparedGraph
from phasegraph.run._fork import nothing_to_resume
from phasegraph.run._inbox import Sent
from phasegraph.store.base import RunMeta
from phasegraph.worker import WorkQueue
from phasegraph.worker._driver import RunDriver
from phasegraph.worker._local_mail import LocalMailbox
from phasegraph.worker._mail import cancel_by_worker, post_reply, reply_applied
from phasegraph.worker._mailbox import Reply

__all__ = ["Executor", "ExecutorOptions"]

_log = logging.getLogger("phasegraph.server")

_PAGE: Final = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorOptions:
    """How the server executes runs.

    Attributes:
        max_runs: How many runs may be stepped at once (others queue for a slot).
        adopt_interval: Seconds between attempts to take over a ``running`` run whose
            lease another process (live, or dead with a lease not yet expired) holds.
        queue: Hand runs to the workers through this queue instead of driving them here
            (the caller closes it).
        read_only: Drive nothing, not even the runs found at start (the server's routes
            refuse whatever would ask for a drive).
    """

    max_runs: int = 64
    adopt_interval: float = 1.0
    queue: WorkQueue | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise InputError(f"max_runs must be at least 1, not {self.max_runs}")
        if not self.adopt_interval > 0:
            raise InputError(f"adopt_interval must be positive, not {self.adopt_interval}")


@final
class Executor:
    """Drives the server's runs as owned asyncio tasks.

    Args:
        engine: The engine whose store holds the runs.
        options: Concurrency limit and takeover interval.
    """

    def __init__(self, engine: Engine, options: ExecutorOptions | None = None) -> None:
        self._engine = engine
        self._options = options = options or ExecutorOptions()
        self._mail = LocalMailbox(engine.clock, self.submit)
        self._driver = RunDriver(
            engine, self._mail, log=_log, retry=options.adopt_interval, max_runs=options.max_runs
        )
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._closing = False
        self.recovered = asyncio.Event()
        """Set once the runs found in the store at start-up were taken care of."""

    # -- public operations ----------------------------------------------------------

    def start(self) -> None:
        """Begin recovery: resume ``running`` runs, arm deadlines of waiting ones."""
        if self._options.queue is not None or self._options.read_only:
            self.recovered.set()  # the workers (or another process) own every run
            return
        task = asyncio.create_task(self._recover(), name="phasegraph-server:recover")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)

    async def create(
        self,
        graph: PreparedGraph,
        run_input: Mapping[str, Any],
        run_id: str | None,
        *,
        actor: Actor | None = None,
    ) -> RunState:
        """Create a run (its seq 0 is committed on return) and drive it in the background.

        ``actor`` (who starts it) is recorded on the seq-0 step.

        Raises:
            InputError: The input does not match the graph's input schema.
            SequenceConflictError: A run with that id exists.
        """
        async with self._engine.start(graph, run_input, run_id=run_id, actor=actor) as run:
            state = run.state
        if self._options.queue is not None:
            await self._options.queue.enqueue(state.run_id)
            _log_run("started", state, outcome="queued for the workers")
            return state
        _log_run("started", state)
        self.submit(state.run_id)
        return state

    async def reply(
        self,
        run_id: str,
        interrupt_id: str,
        result: ActionResult,
        *,
        actor: Actor | None = None,
        step: int | None = None,
        trusted: bool = False,
    ) -> RunState:
        """Answer a pending interrupt and log it; see :meth:`_reply`.

        ``actor`` (who answers: held to the gate's reviewers unless ``trusted``, and
        recorded) and ``step`` (the gate's opening the answer is for) are as
        :meth:`~phasegraph.Engine.reply` takes them.
        """
        reply = Reply(interrupt_id, result, actor=actor, step=step, trusted=trusted)
        state = await self._reply(run_id, reply)
        _log_run("reply", state, outcome=result.trigger, interrupt_id=interrupt_id)
        return state

    async def _reply(self, run_id: str, reply: Reply) -> RunState:
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
                    await reply.apply(run)
                    state = run.state
            except LeaseHeldError:
                if not await queue.queued(run_id):
                    raise
                # A worker drives the run (a gate opened beside running nodes): it applies
                # the reply between two steps, as this server would.
                before = await post_reply(
                    self._engine,
                    queue,
                    run_id,
                    reply.interrupt_id,
                    reply.result,
                    actor=reply.actor,
                    step=reply.step,
                    trusted=reply.trusted,
                )
                return await reply_applied(self._engine, run_id, reply.interrupt_id, before.seq)
            await queue.enqueue(run_id)
            return state
        self._refuse_if_closing(run_id)
        done = self._mail.post_reply(run_id, reply)
        self.submit(run_id)
        return await done

    async def send(
        self, run_id: str, payload: Mapping[str, Any], *, message_id: str | None = None
    ) -> Sent:
        """Keep a message in the run's inbox (or refuse it) and have the run take it.

        The run's drive delivers it where the machine takes it (see
        :meth:`~phasegraph.Engine.send`); in front of workers, the run is queued for them.

        Raises:
            RunBusyError: The run is busy and its graph rejects messages then.
            RunStateError: The run has finished, or its graph takes no messages.
            InputError: The id or payload is unusable.
        """
        self._refuse_if_closing(run_id)
        sent = await self._engine.post_message(run_id, payload, message_id=message_id)
        if not sent.duplicate:
            queue = self._options.queue
            if queue is not None:
                await queue.enqueue(run_id)  # the wake-up: the worker driving it looks
            else:
                self.submit(run_id)  # its drive looks at the inbox between two steps
        _log_run("message", sent.state, message=sent.id, position=str(sent.position))
        return sent

    async def resume(self, run_id: str) -> RunState:
        """Drive an unfinished run in the background; return its head state.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run already finished.
        """
        state = await self._engine.get(run_id)
        if state.status.terminal:
            raise nothing_to_resume(run_id, state.status)
        if self._options.queue is not None:
            await self._options.queue.enqueue(run_id)
            return state
        self.submit(run_id)
        return state

    async def cancel(self, run_id: str, reason: str, *, actor: Actor | None = None) -> RunState:
        """Cancel the run and log it; see :meth:`_cancel`.

        ``actor`` (who cancels it) is recorded on the cancel step.
        """
        state = await self._cancel(run_id, reason, actor)
        _log_run("cancel", state, outcome=reason)
        return state

    async def _cancel(self, run_id: str, reason: str, actor: Actor | None) -> RunState:
        """Stop driving the run (at its last committed step) and commit it as cancelled.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run already finished.
            LeaseHeldError: Another process is driving the run.
        """
        queue = self._options.queue
        if queue is not None:
            try:
                state = await self._engine.cancel(run_id, reason, actor=actor)
            except LeaseHeldError:
                if not await queue.queued(run_id):
                    raise
                state = await cancel_by_worker(self._engine, queue, run_id, reason, actor=actor)
            await queue.unschedule(run_id)  # its deadline has nothing to fire
            return state
        self._refuse_if_closing(run_id)
        done = self._mail.request_cancel(run_id, reason, actor=actor)
        self.submit(run_id)  # committed between two steps of its drive, or a new drive's
        return await done

    async def fork(
        self,
        run_id: str,
        at_seq: int | None,
        patch: Mapping[str, Any] | None,
        *,
        actor: Actor | None = None,
    ) -> RunState:
        """Fork a run at ``at_seq`` with ``patch``; drive the fork if it is unfinished.

        ``actor`` (who forks it) is recorded on the fork's first step.
        """
        new_id = await self._engine.fork(run_id, at_seq, patch, actor=actor)
        state = await self._engine.get(new_id)
        if self._options.queue is not None:
            if state.status is RunStatus.RUNNING:
                await self._options.queue.enqueue(new_id)
            return state
        if state.status is RunStatus.RUNNING:
            self.submit(new_id)
        else:
            await self._driver.settle(state)
        return state

    def submit(self, run_id: str) -> None:
        """Drive the run in the background; if this server drives it, have it look at its mail."""
        if self._closing:
            return
        if run_id in self._drivers:
            self._driver.notify(run_id)  # or its drive has yet to start, and looks first
            return
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
            "deadlines": self._mail.wake_ups,
            "max_runs": self._options.max_runs,
        }

    async def aclose(self) -> None:
        """Cancel every task at its last committed step and wait for them (idempotent)."""
        self._closing = True
        tasks = [*self._drivers.values(), *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._mail.aclose()
        await self._driver.aclose()

    def _refuse_if_closing(self, run_id: str) -> None:
        if self._closing:
            raise RunStateError(
                f"run {run_id!r} cannot be answered now; the server is stopping", run_id=run_id
            )

    # -- driving --------------------------------------------------------------------

    async def _drive(self, run_id: str) -> None:
        state = None
        try:
            state = (await self._driver.drive(run_id)).state
            if state is not None:
                _log_idle(state)
        except Exception:  # a background task has nobody to raise to: log it
            _log.exception("driving run %s failed", run_id)
        finally:
            # No await between the drive's end and this: mail posted later starts a drive.
            self._drivers.pop(run_id, None)
            if self._mail.has_mail(run_id):
                # Posted while the drive was finishing, after it last read its mail: the
                # sender would wait for ever without a drive to answer it.
                self.submit(run_id)

    # -- start-up -------------------------------------------------------------------

    async def _recover(self) -> None:
        """Resume ``running`` runs and arm the deadlines of waiting and parked ones.

        A waiting run with a message in its inbox is driven too: it was kept, and the
        server stopped before the run took it.
        """
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
                await self._driver.settle(await self._engine.get(run_id))
                if await self._engine.store.messages(run_id, limit=1):
                    self.submit(run_id)  # a message kept before a crash waits to be taken
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


def _log_run(event: str, state: RunState, node: str | None = None, **more: str) -> None:
    """One line about a run: its id, graph, node and outcome (``fields`` for JSON logs)."""
    if not _log.isEnabledFor(logging.INFO):
        return
    fields = {"event": f"run_{event}", "run_id": state.run_id, "graph": state.graph}
    fields |= {"node": node} if node is not None else {}
    fields |= {"status": str(state.status), **more}
    where = f" at {node}" if node is not None else ""
    outcome = more.get("outcome")
    said = f": {outcome}" if outcome else ""
    _log.info(
        "run %s (%s) %s%s, now %s%s",
        state.run_id,
        state.graph,
        event,
        where,
        state.status,
        said,
        extra={"fields": fields},
    )


def _log_idle(state: RunState) -> None:
    """Say how a drive left the run: ended (and how), or which gates it waits at."""
    if state.status.terminal:
        failure = state.errors[-1] if state.errors and state.status is RunStatus.FAILED else None
        if failure is None:
            _log_run(str(state.status), state)
        else:
            _log_run(str(state.status), state, failure.node, outcome=failure.message)
        return
    for interrupt in state.interrupts.values():
        deadline = interrupt.deadline.isoformat() if interrupt.deadline else ""
        _log_run(
            "gate_open",
            state,
            interrupt.node,
            outcome=f"{interrupt.kind} {interrupt.id}",
            interrupt_id=interrupt.id,
            deadline=deadline,
        )


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("server task %s failed", task.get_name(), exc_info=task.exception())
