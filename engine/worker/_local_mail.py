"""The in-process mailbox: for a process that drives its own runs (a server, and locally).

It is the :class:`~phasegraph.worker._mailbox.Mailbox` of the server and of
:func:`~phasegraph.worker.drive_locally`. A reply or a cancel posted here gets a future,
which the drive resolves with the run right after the reply's (or the cancel's) step, or
fails with the refusal. Deadline wake-ups are asyncio timers, and child runs are
launched, by calling the host back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import final

from phasegraph.errors import PhasegraphError, RunStateError
from phasegraph.model import Actor, RunState
from phasegraph.run import Clock
from phasegraph.worker._mailbox import Cancel, Outcome, Reply

__all__ = ["LocalMailbox"]


@dataclass(frozen=True, slots=True)
class _Letter:
    """A reply or a cancel request, and the future its sender awaits."""

    content: Reply | Cancel
    done: asyncio.Future[RunState]


@final
class LocalMailbox:
    """Replies, cancel requests and wake-ups of the runs one process drives.

    Args:
        clock: Tells how far away a deadline is.
        wake: Called with a run id once its wake-up time passed.
    """

    def __init__(self, clock: Clock, wake: Callable[[str], None]) -> None:
        self._clock = clock
        self._wake = wake
        self._replies: dict[str, list[_Letter]] = {}
        self._cancels: dict[str, list[_Letter]] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}

    def post_reply(self, run_id: str, reply: Reply) -> asyncio.Future[RunState]:
        """Queue a reply; the future receives the run right after its step."""
        return self._post(self._replies, run_id, reply)

    def request_cancel(
        self, run_id: str, reason: str, *, actor: Actor | None = None
    ) -> asyncio.Future[RunState]:
        """Queue a cancel request; the future receives the run once cancelled.

        ``actor`` (who cancels: recorded on the cancel step) is as
        :meth:`~phasegraph.Engine.cancel` takes it.
        """
        return self._post(self._cancels, run_id, Cancel(reason, actor))

    def has_mail(self, run_id: str) -> bool:
        """Whether a reply or cancel request of the run still waits for an answer."""
        letters = [*self._replies.get(run_id, ()), *self._cancels.get(run_id, ())]
        return any(not letter.done.done() for letter in letters)

    @property
    def wake_ups(self) -> int:
        """How many wake-ups are armed."""
        return len(self._timers)

    async def aclose(self) -> None:
        """Disarm every wake-up and refuse the mail left (idempotent)."""
        timers = list(self._timers.values())
        self._timers.clear()
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        for run_id in {*self._replies, *self._cancels}:
            self.left(run_id, RunStateError("the server is stopping", run_id=run_id))

    # -- the Mailbox protocol -----------------------------------------------------------

    async def replies(self, run_id: str) -> Sequence[Reply]:
        """The replies waiting, oldest first; replies their senders withdrew are dropped."""
        letters = self._replies.get(run_id, [])
        letters[:] = [letter for letter in letters if not letter.done.done()]
        if not letters:
            self._replies.pop(run_id, None)
        return [letter.content for letter in letters if isinstance(letter.content, Reply)]

    async def replies_done(self, run_id: str, outcomes: Sequence[Outcome]) -> None:
        """Answer the first ``len(outcomes)`` replies and forget them."""
        letters = self._replies.get(run_id, [])
        for letter, outcome in zip(letters, outcomes, strict=False):
            _answer(letter, outcome)
        del letters[: len(outcomes)]
        if not letters:
            self._replies.pop(run_id, None)

    async def cancel_requested(self, run_id: str) -> Cancel | None:
        """The first pending cancel request."""
        letters = self._cancels.get(run_id)
        if not letters or not isinstance(letters[0].content, Cancel):
            return None
        return letters[0].content

    async def cancel_done(self, run_id: str, outcome: Outcome) -> None:
        """Answer every cancel request of the run with ``outcome``."""
        for letter in self._cancels.pop(run_id, []):
            _answer(letter, outcome)

    async def wake_at(self, run_id: str, when: datetime | None) -> None:
        """Arm (or replace, or with ``None`` disarm) the run's wake-up timer."""
        timer = self._timers.pop(run_id, None)
        if timer is not None:
            timer.cancel()
        if when is not None:
            delay = max((when - self._clock.now()).total_seconds(), 0.0)
            name = f"phasegraph:wake:{run_id}"
            self._timers[run_id] = asyncio.create_task(self._fire(run_id, delay), name=name)

    def left(self, run_id: str, why: PhasegraphError) -> None:
        """Answer every reply and cancel request of the run with ``why``."""
        for letter in [*self._replies.pop(run_id, []), *self._cancels.pop(run_id, [])]:
            _answer(letter, why)

    async def launch(self, run_id: str) -> None:
        """Have the run driven in this process (the host knows whether it is already)."""
        self._wake(run_id)

    async def answer(self, run_id: str, reply: Reply) -> None:
        """Queue a reply nobody waits for (a child run's end) and have the run driven."""
        done = self.post_reply(run_id, reply)
        done.add_done_callback(_unread)  # its refusal is for nobody: no "never retrieved"
        self._wake(run_id)

    # -- helpers --------------------------------------------------------------------------

    def _post(
        self, box: dict[str, list[_Letter]], run_id: str, content: Reply | Cancel
    ) -> asyncio.Future[RunState]:
        done: asyncio.Future[RunState] = asyncio.get_running_loop().create_future()
        box.setdefault(run_id, []).append(_Letter(content, done))
        return done

    async def _fire(self, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        del self._timers[run_id]
        self._wake(run_id)


def _unread(done: asyncio.Future[RunState]) -> None:
    if not done.cancelled():
        done.exception()


def _answer(letter: _Letter, outcome: Outcome) -> None:
    if letter.done.done():  # its sender went away
        return
    if isinstance(outcome, PhasegraphError):
        letter.done.set_exception(outcome)
    else:
        letter.done.set_result(outcome)
