"""Commands that answer, talk to and stop runs: reply, send, cancel."""

from __future__ import annotations

import argparse
import contextlib
import json
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.cli._gates import open_gates, run_json
from phasegraph.cli._handler import Handlers
from phasegraph.cli._migrate import refuse_gone_flags, say_drift
from phasegraph.cli._runs import drive_children_here, tell_parent
from phasegraph.cli._support import (
    emit,
    exit_for,
    finished,
    local_actor,
    parse_inputs,
    progress,
    resume_command,
    with_engine,
)
from phasegraph.codec._json import json_int
from phasegraph.errors import InputError, LeaseHeldError
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


def _message_of(args: argparse.Namespace) -> dict[str, Any]:
    """The message ``send`` was given: ``--text`` as ``{"text": ...}``, or ``--payload``.

    Raises:
        InputError: ``--payload`` is not a JSON object.
    """
    if args.text is not None:
        return {"text": args.text}
    try:
        payload = json.loads(args.payload, parse_int=json_int)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"--payload: not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise InputError(f"--payload: expected a JSON object, not {type(payload).__name__}")
    return payload


async def _cmd_send(args: argparse.Namespace) -> int:
    message = _message_of(args)

    async def body(engine: Engine) -> int:
        from phasegraph.worker import has_work_queue  # here: see cli._runs

        if args.detach:
            from phasegraph.cli._worker import can_hand_over

            can_hand_over(args, engine.store)
        sent = await engine.send(args.run, message, message_id=args.id, drive=not args.detach)
        if not sent.taken and has_work_queue(engine.store):
            from phasegraph.cli._worker import hand_over

            await hand_over(engine, args.run)  # the wake-up of the worker driving it
        where = (
            "taken"
            if sent.taken
            else f"kept in the inbox (position {sent.position}): the run takes it in order"
        )
        said = "was sent already: " if sent.duplicate else ""
        line = f"message {sent.id} to run {args.run} {said}{where}"
        if args.json:
            gates = await open_gates(engine, sent.state)
            view = {
                "id": sent.id,
                "position": sent.position,
                "duplicate": sent.duplicate,
                "taken": sent.taken,
                "run": run_json(sent.state, gates, driving=False),
            }
            emit(args, view, "", plain=True)
            return exit_for(sent.state.status) if sent.taken and not args.detach else 0
        print(line)
        if args.detach or not sent.taken:
            return 0
        return await finished(args, engine, sent.state)

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
        "send": _cmd_send,
        "cancel": _cmd_cancel,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
