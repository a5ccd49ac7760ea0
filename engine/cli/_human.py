"""Commands that answer and stop runs: reply, cancel."""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import Any

from phasegraph.api import Engine
from phasegraph.cli._commands import Handlers
from phasegraph.cli._runs import fits_changed_graph
from phasegraph.cli._support import emit, finished, parse_inputs, progress, with_engine

__all__ = ["HANDLERS"]


def _trigger_of(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    if args.confirm:
        return "confirm", {}
    if args.reject is not None:
        return "reject", {"feedback": args.reject}
    return str(args.trigger), {}


async def _cmd_reply(args: argparse.Namespace) -> int:
    trigger, payload = _trigger_of(args)
    data = parse_inputs(args.data, None)

    async def body(engine: Engine) -> int:
        if args.allow_changed:
            await fits_changed_graph(engine, args.run)
        if args.detach:
            return await _reply_detached(args, engine, trigger, payload, data)
        with await progress(args, engine, args.run):
            state = await engine.reply(
                args.run,
                args.id,
                trigger,
                payload=payload,
                data=data,
                allow_changed=args.allow_changed,
            )
        return await finished(args, engine, state)

    return await with_engine(args, body)


async def _reply_detached(
    args: argparse.Namespace,
    engine: Engine,
    trigger: str,
    payload: dict[str, str],
    data: dict[str, Any],
) -> int:
    """Commit the answer here (a refused one is said at once) and let a worker go on."""
    from phasegraph.cli._worker import can_hand_over, detached, hand_over

    can_hand_over(args, engine.store)
    state = await engine.reply(
        args.run,
        args.id,
        trigger,
        payload=payload,
        data=data,
        drive=False,
        allow_changed=args.allow_changed,
    )
    await hand_over(engine, state.run_id)
    return detached(args, state)


async def _cmd_cancel(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        before = await engine.get(args.run)
        state = await engine.cancel(args.run, args.reason)
        closed = sorted(before.interrupts)
        text = f"run {state.run_id} cancelled"
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
