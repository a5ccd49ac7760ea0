"""Commands that answer and stop runs: reply, cancel."""

from __future__ import annotations

import argparse
import contextlib
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.cli._handler import Handlers
from phasegraph.cli._migrate import refuse_gone_flags, say_drift
from phasegraph.cli._runs import drive_children_here, tell_parent
from phasegraph.cli._support import (
    emit,
    finished,
    local_actor,
    parse_inputs,
    progress,
    resume_command,
    with_engine,
)
from phasegraph.errors import LeaseHeldError
from phasegraph.model import frozen_map

__all__ = ["HANDLERS"]


def _trigger_of(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    payload = parse_inputs(args.payload, None)
    if args.confirm:
        return "confirm", payload
    if args.reject is not None:
        return "reject", {**payload, "feedback": args.reject}
    return str(args.trigger), payload


async def _cmd_reply(args: argparse.Namespace) -> int:
    trigger, payload = _trigger_of(args)
    data = parse_inputs(args.data, None)

    refuse_gone_flags(args)

    async def body(engine: Engine) -> int:
        head = None if args.detach else await engine.get(args.run)
        if head is not None:
            await say_drift(args, engine, head)
        if args.detach:
            from phasegraph.cli._worker import can_hand_over

            can_hand_over(args, engine.store)
        try:
            # Detached, nothing is driven here: no progress display.
            shown = (
                contextlib.nullcontext()
                if head is None
                else await progress(args, engine, args.run, state=head)
            )
            with shown:
                state = await engine.reply(
                    args.run,
                    args.id,
                    trigger,
                    payload=payload,
                    data=data,
                    drive=not args.detach,
                    actor=local_actor(),
                    step=args.step,
                    trusted=True,
                )
                if not args.detach:
                    state = await drive_children_here(engine, state)
        except LeaseHeldError:
            from phasegraph.cli._worker import reply_by_worker

            result = ActionResult(
                trigger=trigger, payload=frozen_map(payload), data=frozen_map(data)
            )
            handed = await reply_by_worker(args, engine, result)
            if handed is None:
                raise  # another process drives the run, no worker
            return handed
        if args.detach:
            from phasegraph.cli._worker import detached, hand_over

            await hand_over(engine, state.run_id)
            return detached(args, state)
        return await finished(args, engine, state)

    return await with_engine(args, body)


async def _cmd_cancel(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        before = await engine.get(args.run)
        from phasegraph.worker import has_work_queue  # here: see cli._runs

        args.workers_drive = has_work_queue(engine.store)
        by = ""
        try:
            state = await engine.cancel(args.run, args.reason, actor=local_actor())
            parent = await tell_parent(engine, state)
            if parent is not None:
                by = f"; its parent run {parent} takes it as failed " + (
                    "(handed to the workers)"
                    if args.workers_drive
                    else f"once resumed ('{resume_command(args, parent)}')"
                )
        except LeaseHeldError:
            from phasegraph.cli._worker import cancel_through_worker

            by_worker = await cancel_through_worker(args, engine)
            if by_worker is None:
                raise  # another process drives the run, no worker
            state, by = by_worker, " by the worker driving it"
        closed = sorted(before.interrupts)
        text = f"run {state.run_id} cancelled{by}"
        if closed:
            text += f"; closed unanswered: {', '.join(closed)}"
        emit(args, {"run_id": state.run_id, "status": state.status, "closed": closed}, text)
        return 0

    return await with_engine(args, body)


HANDLERS: Handlers = MappingProxyType(
    {
        "reply": _cmd_reply,
        "cancel": _cmd_cancel,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
