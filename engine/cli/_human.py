"""Commands that answer and stop runs: reply, cancel."""

from __future__ import annotations

import argparse

from phasegraph.api import Engine
from phasegraph.cli._progress import progress_for
from phasegraph.cli._support import AddCommand, emit, finished, parse_inputs, with_engine

__all__ = ["register"]


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


def register(add: AddCommand) -> None:
    """Add this module's commands to the parser."""
    reply = add("reply", _cmd_reply, "answer a run's pending interrupt and continue the run")
    reply.add_argument("run", help="the run id")
    reply.add_argument("--id", required=True, help="the interrupt id (see 'phasegraph status RUN')")
    choice = reply.add_mutually_exclusive_group(required=True)
    choice.add_argument("--confirm", action="store_true", help="fire 'confirm'")
    choice.add_argument("--reject", metavar="FEEDBACK", help="fire 'reject' with this feedback")
    choice.add_argument("--trigger", metavar="NAME", help="fire any trigger the state accepts")
    reply.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a data update sent with the reply (JSON if it parses); repeatable",
    )
    cancel = add("cancel", _cmd_cancel, "cancel a waiting, parked or abandoned run")
    cancel.add_argument("run", help="the run id")
    cancel.add_argument("--reason", default="cancelled by request", help="recorded on each node")
