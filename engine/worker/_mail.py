"""Replies and cancels for a run a worker is driving: checked here, applied there.

A gate can open while other nodes of its run still work; the worker driving the run then
holds its lease, so nobody else may commit the answer. The answer is checked against the
open gate where it is given (so a wrong one is refused at once, in one line), posted to
the run's inbox, and the worker applies it between two steps of the run. A cancel is a
request the worker acts on by stopping the drive at its last committed step.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.errors import IllegalTriggerError, RunStateError
from phasegraph.model import RunState, RunStatus
from phasegraph.worker._worker import WorkQueue

__all__ = ["cancel_by_worker", "post_reply", "reply_applied"]

_POLL: Final = 0.05  # seconds between looks at the run while a worker acts


async def post_reply(
    engine: Engine, queue: WorkQueue, run_id: str, interrupt_id: str, result: ActionResult
) -> RunState:
    """Check a reply against the run's open gate and hand it to the worker driving the run.

    Returns:
        The run as committed before the reply.

    Raises:
        RunStateError: The run has no such pending interrupt.
        IllegalTriggerError: The waiting node's state does not accept the trigger.
    """
    state = await engine.get(run_id)
    interrupt = state.interrupts.get(interrupt_id)
    if interrupt is None:
        pending = ", ".join(sorted(state.interrupts)) or "none"
        raise RunStateError(
            f"run {run_id!r} has no pending interrupt {interrupt_id!r} (pending: {pending})",
            run_id=run_id,
        )
    node = state.nodes[interrupt.node]
    prepared = engine.prepare(state.graph_source)
    machine = prepared.workflow.nodes[interrupt.node].machine
    legal = prepared.machines.legal_triggers(machine, node.path)
    if result.trigger not in legal:
        raise IllegalTriggerError(
            result.trigger, node.state, legal, node_id=interrupt.node, run_id=run_id
        )
    reply = {
        "interrupt_id": interrupt_id,
        "trigger": result.trigger,
        "payload": dict(result.payload),
        "data": dict(result.data),
    }
    await queue.post_reply(run_id, reply)
    return state


async def reply_applied(engine: Engine, run_id: str, interrupt_id: str, since: int) -> RunState:
    """Wait until the worker has applied the reply; the run right after its step.

    Args:
        engine: The engine.
        run_id: The run.
        interrupt_id: The interrupt answered.
        since: The run's seq when the reply was posted (its step comes later).
    """
    while True:
        state = await engine.get(run_id)
        if interrupt_id not in state.interrupts or state.status.terminal:
            break
        await asyncio.sleep(_POLL)
    for record in reversed(await engine.history(run_id, start=since + 1)):
        if record.kind == "reply" and any(e.get("id") == interrupt_id for e in record.events):
            return await engine.get(run_id, record.seq)
    return state  # closed otherwise (its deadline fired first, or the run was cancelled)


async def cancel_by_worker(
    engine: Engine, queue: WorkQueue, run_id: str, reason: str, *, within: float
) -> RunState:
    """Ask the worker driving the run to cancel it; the run once cancelled.

    Raises:
        RunStateError: The run ended otherwise first, or had not ended ``within``
            seconds (the request stays: the next worker to drive the run cancels it).
    """
    await queue.request_cancel(run_id, reason)
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
