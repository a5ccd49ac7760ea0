"""Commands that answer and stop runs: reply, cancel."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from phasegraph.api import Engine
from phasegraph.cli._commands import Handlers
from phasegraph.cli._progress import progress_for
from phasegraph.cli._support import emit, finished, parse_inputs, with_engine

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
        with progress_for(engine.bus, quiet=args.quiet or args.json):
            state = await engine.reply(args.run, args.id, trigger, payload=payload, data=data)
        return finished(args, state)

    return await with_engine(args, body)


async def _cmd_cancel(args: argparse.Namespace) -> int:
    async def body(engine: Engine) -> int:
        state = await engine.cancel(args.run, args.reason)
        emit(
            args, {"run_id": state.run_id, "status": state.status}, f"run {state.run_id} cancelled"
        )
        return 0

    return await with_engine(args, body)


HANDLERS: Handlers = MappingProxyType(
    {
        "reply": _cmd_reply,
        "cancel": _cmd_cancel,
    }
)
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
