"""Drive a run until it is idle, for a process that serves many runs: the server and workers.

A :class:`RunDriver` opens a run (taking its lease), steps it until nothing more can
happen and gives the lease back. Between two steps it acts on the run's :class:`Mailbox`:
a cancel request is committed in the open run, then each reply is applied and answered
with the state right after its step, or with its refusal; the run then looks at its
inbox (messages, see :mod:`phasegraph.run._inbox`). :meth:`RunDriver.notify` says mail
arrived; a cancel request, or a message that cuts a busy node short (``interrupt``,
``rollback``), also cuts a long action short (the run is closed at its last committed
step and reopened to commit the cancel, or to take the message). An idle run's next deadline goes
to :meth:`Mailbox.wake_at`. At the start and the end of each drive the run's child runs
are looked after (:class:`~phasegraph.worker._children.ChildRuns`): those its gates wait
for are launched, or answered if they ended; a child run left ended answers its parent.
A lease held elsewhere is waited for briefly; a run still held, whose lease was lost or
whose store went away is left for later: logged once per refusal and tried again after
twice the last wait (up to a minute) while it still needs driving. Mailboxes:
:class:`~phasegraph.worker._local_mail.LocalMailbox` (in process: the server,
:func:`~phasegraph.worker.drive_locally`) and :class:`~phasegraph.worker._mail.QueueMailbox`
(the work queue, the workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, final

from phasegraph.api import Engine
from phasegraph.errors import (
    CodecError,
    DefinitionUnavailableError,
    LeaseHeldError,
    LeaseLostError,
    PhasegraphError,
    RunError,
    RunNotFoundError,
    RunStateError,
    StoreUnavailableError,
)
from phasegraph.model import RunState, RunStatus
from phasegraph.run import Run
from phasegraph.worker._children import ChildRuns
from phasegraph.worker._mailbox import Cancel, Mailbox, Outcome

__all__ = ["Driven", "RunDriver"]

_HELD_RETRIES: Final = (0.1, 0.3, 1.0, 2.0)  # seconds: waits for a lease held elsewhere
_MAX_WAIT: Final = 60.0  # seconds: the longest wait before a run left for later is tried again
_DEADLINE_SLACK: Final = timedelta(milliseconds=20)
"""Wake a little after a deadline, so the interpreter sees it as passed."""
_LEFT: Final = (LeaseHeldError, LeaseLostError, StoreUnavailableError)


@dataclass(frozen=True, slots=True)
class Driven:
    """How a drive ended.

    Attributes:
        state: The run as the drive left it idle (finished, waiting, parked), or as found
            when it no longer needed driving; ``None`` if it could not be read or driven.
        steps: Steps committed by this drive.
    """

    state: RunState | None
    steps: int = 0


@final
class _Look:
    """A cancel request not looked up yet: the delivery asks the mailbox."""


_LOOK: Final = _Look()


@dataclass(slots=True)
class _Drive:
    """A drive under way: what the host told it since it last looked."""

    mail: bool = True  # look at the mailbox before the next step
    attempt: asyncio.Task[tuple[RunState, int]] | None = None
    stepping: bool = False  # in a step (not delivering): a cancel request may cut it short
    run: Run | None = None  # the run while this drive holds it open


@final
class RunDriver:
    """Drives runs until idle, one drive per run at a time, over a :class:`Mailbox`.

    Args:
        engine: The engine (and store) runs are driven with.
        mailbox: Where replies, cancel requests and wake-ups are found and answered.
        log: The host's logger: runs left for later are logged there.
        retry: Seconds before a run left for later is first tried again.
        max_runs: Runs open at once (``None``: as many as the host starts).
        hand_off: Raise :class:`~phasegraph.errors.DefinitionUnavailableError` from
            :meth:`drive` (a run whose stored definition does not load in this process),
            for a host that shares runs with others to hand it on; else it is logged.
    """

    def __init__(
        self,
        engine: Engine,
        mailbox: Mailbox,
        *,
        log: logging.Logger,
        retry: float = 1.0,
        max_runs: int | None = None,
        hand_off: bool = False,
    ) -> None:
        self._engine = engine
        self._hand_off = hand_off
        self._mailbox = mailbox
        self._log = log
        self._retry = retry
        self._slots = asyncio.Semaphore(max_runs) if max_runs else None
        self._drives: dict[str, _Drive] = {}
        self._looks: set[asyncio.Task[None]] = set()
        self._children = ChildRuns(engine, mailbox, log=log)

    def notify(self, run_id: str) -> bool:
        """Mail arrived for the run: its drive looks before the next step.

        A cancel request also cuts the step under way short.

        Returns:
            Whether a drive of the run is under way (if not, the host starts one).
        """
        drive = self._drives.get(run_id)
        if drive is None:
            return False
        drive.mail = True
        self._watch(self._look_for_cancel(run_id, drive))
        return True

    async def drive(self, run_id: str) -> Driven:
        """Drive the run until idle and no mail is left; retry later if refused.

        Args:
            run_id: The run (the host starts one drive per run at a time).

        Raises:
            RuntimeError: The run is being driven already.
        """
        if run_id in self._drives:
            raise RuntimeError(f"run {run_id!r} is being driven already")
        drive = self._drives[run_id] = _Drive()
        try:
            return await self._until_idle(run_id, drive)
        except BaseException:  # stopped (the host closes), or a mailbox's own error
            stopped = f"the drive of run {run_id!r} stopped before its mail was dealt with"
            self._mailbox.left(run_id, RunStateError(stopped, run_id=run_id))
            raise
        finally:
            del self._drives[run_id]

    async def settle(self, state: RunState) -> bool:
        """Look after a run left idle: its next deadline, its child runs, its parent.

        Asks for a wake-up at the run's next deadline (none if it has none); launches the
        child runs its open gates wait for (see :mod:`phasegraph.worker._children`); and,
        for a child run that ended, answers its parent's gate.

        Returns:
            Whether a reply was handed to the run itself (a child run of it had ended).
        """
        deadlines = [i.deadline for i in state.interrupts.values() if i.deadline is not None]
        if state.status.terminal or not deadlines:
            await self._mailbox.wake_at(state.run_id, None)
        else:
            await self._mailbox.wake_at(state.run_id, min(deadlines) + _DEADLINE_SLACK)
        return await self._children.settle(state)

    async def aclose(self) -> None:
        """Stop the looks for cancel requests still under way (drives are the host's)."""
        for task in self._looks:
            task.cancel()
        await asyncio.gather(*self._looks, return_exceptions=True)

    # -- the drive ----------------------------------------------------------------------

    async def _until_idle(self, run_id: str, drive: _Drive) -> Driven:
        refusals = steps = 0
        held = iter(_HELD_RETRIES)
        while True:
            try:
                done = await self._attempt(run_id, drive)
            except _LEFT as exc:
                if isinstance(exc, LeaseHeldError) and (pause := next(held, None)) is not None:
                    await asyncio.sleep(pause)  # its holder may be giving it back right now
                    continue
                self._mailbox.left(run_id, exc)
                wait, refusals = min(self._retry * 2**refusals, _MAX_WAIT), refusals + 1
                # Held elsewhere is routine; a store away is the host's to say once (a
                # worker's outage line), not once per run; a lease taken over is not.
                log = self._log.warning if isinstance(exc, LeaseLostError) else self._log.info
                log("run %s left for later (%s); trying again in %.1f s", run_id, exc, wait)
                await asyncio.sleep(wait)
                if (found := await self._needs_driving(run_id)) is not None:
                    return Driven(found.state, steps)
                held = iter(_HELD_RETRIES)
                continue
            except PhasegraphError as exc:
                if self._hand_off and isinstance(exc, DefinitionUnavailableError):
                    raise  # another worker may have what this one lacks: the host hands it on
                # Not found, or its definition does not load here: a person must act
                # (the run stays as committed; 'phasegraph migrate', say).
                self._mailbox.left(run_id, exc)
                level = logging.INFO if isinstance(exc, RunNotFoundError) else logging.ERROR
                self._log.log(level, "run %s cannot be driven: %s", run_id, exc)
                return Driven(None, steps)
            if done is None:
                continue  # a cancel request cut the step short: committed on reopening
            state, stepped = done
            steps += stepped
            if await self.settle(state):
                drive.mail = True  # a child run had ended: its answer is in the mail
            if not drive.mail:  # no await from here to the caller's clean-up
                return Driven(state, steps)

    async def _attempt(self, run_id: str, drive: _Drive) -> tuple[RunState, int] | None:
        """Open the run and step it until idle: its state and steps, or ``None`` if cut short.

        The steps run in a task of their own, which a cancel request cancels.
        """
        await self._engine.leases.room()  # no more runs than the keeper keeps renewed
        async with self._slots or contextlib.nullcontext():
            drive.mail = True  # mail may have come while no drive held the run
            task = asyncio.create_task(self._steps(run_id, drive))
            drive.attempt = task
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:  # the host stops: at the last committed step
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
            finally:
                drive.attempt = None
                drive.run = None
            return None if task.cancelled() else task.result()

    async def _steps(self, run_id: str, drive: _Drive) -> tuple[RunState, int]:
        steps = 0
        # Looked at before opening: a run is cancelled even if its graph changed since it
        # started (as engine.cancel does). The first delivery acts on what this found.
        cancel: Cancel | _Look | None = await self._mailbox.cancel_requested(run_id)
        async with self._engine.open(run_id, to_cancel=cancel is not None) as run:
            # Child runs its gates wait for: launched if a crash left them unlaunched, and
            # answered if they ended (the answers are the mail delivered first).
            if not run.state.status.terminal and await self._children.look(run.state):
                drive.mail = True
            drive.run = run
            while True:
                if drive.mail:
                    drive.mail = False
                    run.expect_message()  # mail may be a message in the run's inbox
                    await self._deliver(run, cancel)
                    cancel = _LOOK
                drive.stepping = True
                try:
                    stepped = await run.next() is not None
                finally:
                    drive.stepping = False
                steps += stepped
                if not stepped and not drive.mail:
                    return run.state, steps

    async def _deliver(self, run: Run, cancel: Cancel | _Look | None) -> None:
        """Act on a cancel request (``cancel``, or looked up), then apply the replies."""
        run_id = run.run_id
        if isinstance(cancel, _Look):
            cancel = await self._mailbox.cancel_requested(run_id)
        if cancel is not None:
            try:
                await run.cancel(cancel.reason, actor=cancel.actor)
                self._log.info("run %s cancelled: %s", run_id, cancel.reason)
                await self._mailbox.cancel_done(run_id, run.state)
            except RunStateError as exc:  # it had finished
                await self._mailbox.cancel_done(run_id, exc)
        outcomes: list[Outcome] = []
        try:
            for reply in await self._mailbox.replies(run_id):
                try:
                    await reply.apply(run)
                    outcomes.append(run.state)
                except (RunError, CodecError) as exc:
                    # Answered meanwhile, a re-delivery after a crash, or refused in the
                    # state the run has reached since it was checked.
                    outcomes.append(exc)
        finally:
            if outcomes:
                await self._mailbox.replies_done(run_id, outcomes)

    async def _needs_driving(self, run_id: str) -> Driven | None:
        """After a refusal: ``None`` to try again, else the run as found (settled)."""
        try:
            state = await self._engine.get(run_id)
            if state.status is RunStatus.RUNNING or (
                not state.status.terminal and await self._mailbox.cancel_requested(run_id)
            ):
                return None
            await self.settle(state)
        except StoreUnavailableError:
            return None
        except PhasegraphError as exc:
            self._log.warning("run %s not driven: %s", run_id, exc)
            return Driven(None)
        return Driven(state)

    # -- cancel requests ----------------------------------------------------------------

    def _watch(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._looks.add(task)
        task.add_done_callback(self._looks.discard)

    async def _look_for_cancel(self, run_id: str, drive: _Drive) -> None:
        """Cut the drive's step short if a cancel was requested, even in a long action.

        The drive also looks between two steps (its mail flag is set), so a request this
        misses (the store away, a drive between two steps) is still acted on there.
        """
        try:
            cancel = await self._mailbox.cancel_requested(run_id)
            # A message that cuts the busy node short (interrupt, rollback) does the same:
            # the run is reopened at its last committed step and takes it first.
            run = drive.run
            if cancel is None and drive.stepping and run is not None:
                cut = await run.message_cuts_in()
            else:
                cut = cancel is not None
        except Exception as exc:  # any mailbox's error: the drive looks again between steps
            self._log.warning("cannot read run %s's cancel request (%s)", run_id, exc)
            return
        if cut and drive.stepping and drive.attempt is not None:
            drive.attempt.cancel()
