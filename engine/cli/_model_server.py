"""The ``model-server`` command: serve a response script as an OpenAI-compatible endpoint.

It prints its base URL on stdout (``--json``: ``{"base_url": ...}``), so ``llm:`` actions
can be pointed at it (``PHASEGRAPH_LLM_BASE_URL``, or a node's ``with.llm.base_url``), and
serves until SIGINT or SIGTERM. It is the server a node's ``with.llm.script`` starts for
each call, kept running: the script format and how an answer is chosen are in the
command's ``--help`` (:mod:`phasegraph.cli._commands`) and the models guide
(``docs/guides/models-and-tools.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.cli._handler import Handlers
from phasegraph.cli._support import EXIT_OK, cannot_listen, emit
from phasegraph.errors import InputError

__all__ = ["HANDLERS"]


def _read_script(path: str) -> list[Mapping[str, Any]]:
    """The script's answers.

    Raises:
        InputError: The file cannot be read, is not JSON, or is not a list of objects.
    """
    try:
        script = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the response script {path!r}: {exc}") from None
    if not isinstance(script, list) or not all(isinstance(entry, dict) for entry in script):
        raise InputError(
            f"the response script {path!r} is not a JSON list of answers "
            '(objects such as {"content": "..."}; see phasegraph model-server --help)'
        )
    return script


async def _cmd_model_server(args: argparse.Namespace) -> int:
    script = _read_script(args.script)
    server = ScriptedModelServer(
        script, by_turn=not args.in_order, max_context=args.max_context, host=args.host,
        port=args.port,
    )  # fmt: skip
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen(args.host, args.port, exc) from None
    try:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        emit(args, {"base_url": server.base_url}, server.base_url)
        sys.stdout.flush()
        if not args.quiet:
            chosen = "in order" if args.in_order else "by turn"
            print(
                f"  answers {len(script)} scripted entries {chosen} from {args.script}; "
                f"point llm: actions at it with PHASEGRAPH_LLM_BASE_URL={server.base_url}",
                file=sys.stderr,
                flush=True,
            )
        await stop.wait()
    finally:
        await server.aclose()
    return EXIT_OK


HANDLERS: Handlers = MappingProxyType({"model-server": _cmd_model_server})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
