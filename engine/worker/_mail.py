"""Replies and cancels for a run a worker is driving: checked here, applied there.

A gate can open while other nodes of its run still work; the worker driving the run then
holds its lease, so nobody else may commit the answer. The answer is checked against the
open gate where it is given (so a wrong one is refused at once, in one line), posted to
the run's inbox, and the worker applies it between two steps of the run. A cancel is a
request the worker acts on by stopping the drive at its last committed step. The
worker's side is :class:`QueueMailbox`, the :class:`~phasegraph.worker.Mailbox` over the
work queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, final

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.errors import PhasegraphError, RunStateError
from phasegraph.model import Actor, RunState, RunStatus, frozen_map
from phasegraph.run._gates import refused_reply
from phasegraph.run._interpreter import check_reply
from phasegraph.worker._mailbox import Cancel, Outcome, Reply
from phasegraph.worker._queue import WorkQueue

__all__ = ["QueueMailbox", "cancel_by_worker", "post_reply", "reply_applied"]

_log = logging.getLogger("phasegraph.worker")
_POLL: Final = 0.05  # seconds between looks at the run while a worker acts


@final
class QueueMailbox:
    """A run's mail in the work queue: its inbox, its cancel request, its deadline.

    Mail stays in the queue until dealt with: a drive that stops short of it leaves it
    for the next drive of the run, on whichever worker.

    Args:
        queue: The store's work queue.
    """

    def __init__(self, queue: WorkQueue) -> None:
        self._queue = queue

    async def replies(self, run_id: str) -> Sequence[Reply]:
        """The replies posted to the run, oldest first."""
        return [_reply_of(reply) for reply in await self._queue.replies(run_id)]

    async def replies_done(self, run_id: str, outcomes: Sequence[Outcome]) -> None:
        """Drop the replies dealt with; a refused one is logged (its sender has gone)."""
        for outcome in outcomes:
            if isinstance(outcome, PhasegraphError):
                _log.warning("reply to run %s not applied: %s", run_id, outcome)
        await self._queue.replies_done(run_id, len(outcomes))

    async def cancel_requested(self, run_id: str) -> Cancel | None:
        """The run's pending cancel request."""
        request = await self._queue.cancel_requested(run_id)
        if request is None:
            return None
        return Cancel(str(request.get("reason", "")), _actor(request.get("actor")))

    async def cancel_done(self, run_id: str, outcome: Outcome) -> None:
        """Drop the request (the run is cancelled, or had finished)."""
        if isinstance(outcome, PhasegraphError):
            _log.info("cancel of run %s not needed: %s", run_id, outcome)
        await self._queue.cancel_done(run_id)

    async def wake_at(self, run_id: str, when: datetime | None) -> None:
        """Record the run's next deadline (or that it has none) for any worker alive then."""
        if when is None:
            await self._queue.unschedule(run_id)
        else:
            await self._queue.schedule(run_id, int(when.timestamp() * 1000))

    def left(self, run_id: str, why: PhasegraphError) -> None:
        """Keep the mail: the run's next drive deals with it."""

    async def launch(self, run_id: str) -> None:
        """Queue the run for the workers, unless it has an entry no worker has finished."""
        if not await self._queue.queued(run_id):
            await self._queue.enqueue(run_id)

    async def answer(self, run_id: str, reply: Reply) -> None:
        """Post the reply to the run's inbox and queue the run (whoever drives it applies it)."""
        await self._queue.post_reply(run_id, _reply_json(reply))


def _reply_json(reply: Reply) -> dict[str, Any]:
    """How a reply waits in a run's inbox (JSON)."""
    result = reply.result
    posted = {
        "interrupt_id": reply.interrupt_id,
        "trigger": result.trigger,
        "payload": dict(result.payload),
        "data": dict(result.data),
        "actor": _actor_json(reply.actor),
        "step": reply.step,
        "trusted": reply.trusted,
    }
    if reply.once:
        posted["once"] = True
    return posted


def _reply_of(posted: dict[str, Any]) -> Reply:
    """A reply as it waited in a run's inbox (see :func:`_reply_json`)."""
    return Reply(
        str(posted.get("interrupt_id", "")),
        ActionResult(
            trigger=str(posted.get("trigger", "")),
            payload=frozen_map(posted.get("payload") or {}),
            data=frozen_map(posted.get("data") or {}),
        ),
        actor=_actor(posted.get("actor")),
        step=step if type(step := posted.get("step")) is int else None,
        trusted=posted.get("trusted") is True,
        once=posted.get("once") is True,
    )


def _actor(value: Any) -> Actor | None:
    """The actor a queued reply or cancel names (the queue is the store's: trusted hands)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    groups = value.get("groups") or []
    return Actor(name=value["name"], groups=tuple(str(g) for g in groups))


def _actor_json(actor: Actor | None) -> dict[str, Any] | None:
    """How a queued reply or cancel names its actor."""
    return None if actor is None else {"name": actor.name, "groups": list(actor.groups)}


async def post_reply(
    engine: Engine,
    queue: WorkQueue,
    run_id: str,
    interrupt_id: str,
    result: ActionResult,
    *,
    actor: Actor | None = None,
    step: int | None = None,
    trusted: bool = False,
) -> RunState:
    """Check a reply against the run's open gate and hand it to the worker driving the run.

    ``actor``, ``step`` and ``trusted`` are as :meth:`~phasegraph.Engine.reply` takes them.

    Returns:
        The run as committed before the reply.

    Raises:
        RunError: The reply is refused as the worker would refuse it: no such pending
            interrupt (a gate answered already, a stale step), a reviewer refused, an
            illegal trigger, a budget spent, a data conflict.
        CodecError: The reply's data cannot be stored.
    """
    state = await engine.get(run_id)
    prepared = await engine.prepared_for(state)
    try:
        check_reply(
            prepared,
            state,
            interrupt_id,
            result,
            engine.clock,
            actor=actor,
            step=step,
            trusted=trusted,
        )
    except RunStateError as exc:
        raise await refused_reply(engine.store, state, interrupt_id, step, exc) from None
    reply = Reply(interrupt_id, result, actor=actor, step=step, trusted=trusted)
    await queue.post_reply(run_id, _reply_json(reply))
    return state


async def reply_applied(
    engine: Engine, run_id: str, interrupt_id: str, since: int, *, within: float | None = None
) -> RunState:
    """Wait until the worker has applied the reply; the run right after its step.

    Args:
        engine: The engine.
        run_id: The run.
        interrupt_id: The interrupt answered.
        since: The run's seq when the reply was posted (its step comes later).
        within: Seconds to wait (default: as :func:`cancel_by_worker`).

    Raises:
        RunStateError: The gate was still open after ``within`` seconds: the worker
            applies the reply between two steps of the run, after a long action, say
            (or refused it in the state the run had reached, and logged why).
    """
    deadline = time.monotonic() + (_patience(engine) if within is None else within)
    while True:
        state = await engine.get(run_id)
        if interrupt_id not in state.interrupts or state.status.terminal:
            break
        if time.monotonic() >= deadline:
            raise RunStateError(
                f"run {run_id!r}: the reply to {interrupt_id!r} is handed to the worker "
                "driving the run but was not applied in time; it is applied between two "
                "of the run's steps (a reply refused there is in the worker's log)",
                run_id=run_id,
            )
        await asyncio.sleep(_POLL)
    for record in reversed(await engine.history(run_id, start=since + 1)):
        if record.kind == "reply" and any(e.get("id") == interrupt_id for e in record.events):
            return await engine.get(run_id, record.seq)
    return state  # closed otherwise (its deadline fired first, or the run was cancelled)


async def cancel_by_worker(
    engine: Engine,
    queue: WorkQueue,
    run_id: str,
    reason: str,
    *,
    actor: Actor | None = None,
    within: float | None = None,
) -> RunState:
    """Ask the worker driving the run to cancel it; the run once cancelled.

    Args:
        engine: The engine.
        queue: The store's work queue.
        run_id: The run.
        reason: Why, as the cancelled run records it.
        actor: Who cancels it, as the cancel step records it.
        within: Seconds to wait (default: two of ``engine``'s lease lengths and 5 s).

    Raises:
        RunStateError: The run ended otherwise first, or had not ended ``within``
            seconds (the request stays: the next worker to drive the run cancels it).
    """
    if within is None:
        within = _patience(engine)
    await queue.request_cancel(run_id, reason, actor=_actor_json(actor))
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        state = await engine.get(run_id)
        if state.status is RunStatus.CANCELLED:
            return state
        if state.status.terminal:
            raise RunStateError(
                f"run {run_id!r} already {state.status}; nothing to cancel", run_id=run_id
            )
        await asyncio.sleep(_POLL)
    raise RunStateError(
        f"run {run_id!r}: the cancel is requested, but no worker has acted on it within "
        f"{within:g} s; the next worker to drive the run cancels it",
        run_id=run_id,
    )


def _patience(engine: Engine) -> float:
    """Seconds to wait for a worker to act on a run: two lease lengths and 5 s.

    Enough for a lease left by a worker that stopped to lapse, and another to take the run.
    """
    return 2 * engine.options.lease_ttl + 5
