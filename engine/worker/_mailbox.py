"""A run's mail as its driver sees it: replies, cancel requests, wake-ups and launches.

The :class:`Mailbox` protocol is what a :class:`~phasegraph.worker._driver.RunDriver`
asks between two steps of a run, and what the child runs of a run
(:mod:`phasegraph.worker._children`) are launched and answered through. Mailboxes:
:class:`~phasegraph.worker._local_mail.LocalMailbox` (in process: the server, and
``phasegraph run`` driving child runs) and :class:`~phasegraph.worker._mail.QueueMailbox`
(the work queue: the workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeAlias

from phasegraph.actions import ActionResult
from phasegraph.errors import PhasegraphError
from phasegraph.model import Actor, RunState
from phasegraph.run import Run

__all__ = ["Cancel", "Mailbox", "Outcome", "Reply"]


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer to a run's pending interrupt, waiting in its mailbox.

    ``actor``, ``step`` and ``trusted`` are as :meth:`~phasegraph.Engine.reply` takes them.
    ``once`` marks a notice that may come more than once (a child run's end, see
    :mod:`phasegraph.worker._children`): when the opening of the gate it quotes is no
    longer open, it was answered already, and the notice is dropped without a word.
    """

    interrupt_id: str
    result: ActionResult
    actor: Actor | None = None
    step: int | None = None
    trusted: bool = False
    once: bool = False

    async def apply(self, run: Run) -> None:
        """Commit this reply on ``run``, held open by the caller (see :meth:`Run.reply`)."""
        if self.once:
            pending = run.state.interrupts.get(self.interrupt_id)
            if pending is None or (self.step is not None and pending.seq != self.step):
                return  # answered already: a second notice of the same end
        await run.reply(
            self.interrupt_id, self.result, actor=self.actor, step=self.step, trusted=self.trusted
        )


@dataclass(frozen=True, slots=True)
class Cancel:
    """A request to cancel a run, waiting in its mailbox.

    ``reason`` and ``actor`` (who asked; recorded on the cancel step) are as
    :meth:`~phasegraph.Engine.cancel` takes them.
    """

    reason: str
    actor: Actor | None = None


Outcome: TypeAlias = RunState | PhasegraphError
"""What became of a reply or a cancel request: the run right after its step, or why not."""


class Mailbox(Protocol):
    """Where a run's replies, cancel requests and deadline wake-ups go between drives."""

    async def replies(self, run_id: str) -> Sequence[Reply]:
        """The replies waiting for the run, oldest first (kept until :meth:`replies_done`)."""
        ...

    async def replies_done(self, run_id: str, outcomes: Sequence[Outcome]) -> None:
        """The first ``len(outcomes)`` replies were dealt with: answer and forget them."""
        ...

    async def cancel_requested(self, run_id: str) -> Cancel | None:
        """The pending cancel request, if there is one."""
        ...

    async def cancel_done(self, run_id: str, outcome: Outcome) -> None:
        """The cancel request was acted on: answer and forget it."""
        ...

    async def wake_at(self, run_id: str, when: datetime | None) -> None:
        """Have the run driven again once ``when`` passed (``None``: no wake-up needed)."""
        ...

    async def launch(self, run_id: str) -> None:
        """Have a run driven that nobody may be driving: a child run (see ``_children``).

        Nothing happens if it is in hand already (queued, or being driven here).
        """
        ...

    async def answer(self, run_id: str, reply: Reply) -> None:
        """Hand the run a reply its drive applies between two steps; have it driven."""
        ...

    def left(self, run_id: str, why: PhasegraphError) -> None:
        """A drive stopped short of the run's mail: answer it with ``why``, or keep it.

        Synchronous, so that nothing arrives between the drive's last look and this.
        """
        ...
