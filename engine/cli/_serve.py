"""The ``serve`` command: run the HTTP API until SIGINT or SIGTERM.

Binding an address other than loopback needs a bearer token (``--token`` or env
``PHASEGRAPH_TOKEN``) unless ``--insecure-no-token`` says a proxy in front authenticates.
On a signal the server stops taking requests, ends event streams and stops every run at
its last committed step; the next ``serve`` on the same store resumes them.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from phasegraph.api import Engine
from phasegraph.cli._support import EXIT_OK, AddCommand, lease_ttl
from phasegraph.errors import InputError
from phasegraph.run import RunOptions
from phasegraph.server import ServerSettings, create_app
from phasegraph.store import open_store, redact_url

__all__ = ["register"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _settings(args: argparse.Namespace, ttl: float) -> ServerSettings:
    token = args.token or None
    if token is None and not _loopback(args.host) and not args.insecure_no_token:
        raise InputError(
            f"serving on {args.host} needs a bearer token: pass --token or set "
            "PHASEGRAPH_TOKEN (or --insecure-no-token behind an authenticating proxy)"
        )
    return ServerSettings(
        token=token,
        allow_python_modules=frozenset(args.allow_python),
        allow_shell=args.allow_shell,
        max_concurrent_runs=args.max_runs,
        upload_dir=Path(args.upload_dir),
        adopt_interval=min(max(ttl / 3, 0.05), 5.0),
    )


async def _cmd_serve(args: argparse.Namespace) -> int:
    ttl = args.lease_ttl if args.lease_ttl is not None else lease_ttl()
    settings = _settings(args, ttl)
    options = RunOptions(lease_ttl=ttl)
    async with open_store(args.store) as store:
        app = create_app(Engine(store, options=options), settings=settings)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, args.host, args.port)
            await site.start()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            for address in runner.addresses:
                host, port = address[0], address[1]
                shown = f"[{host}]" if ":" in host else host
                print(f"phasegraph serving http://{shown}:{port}", flush=True)
            if not args.quiet:
                print(f"  store {redact_url(args.store)}", file=sys.stderr, flush=True)
            await stop.wait()
        finally:
            await runner.cleanup()
    return EXIT_OK


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return int(text)


def register(add: AddCommand) -> None:
    """Add the ``serve`` command to the parser."""
    serve = add("serve", _cmd_serve, "serve the HTTP API: runs, events, replies (until Ctrl-C)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    serve.add_argument("--port", type=int, default=8321, help="port (default %(default)s; 0: any)")
    serve.add_argument(
        "--token",
        default=os.environ.get("PHASEGRAPH_TOKEN"),
        help="bearer token clients must send (env PHASEGRAPH_TOKEN, which keeps it out of ps)",
    )
    serve.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="allow a non-loopback --host without a token (only behind an authenticating proxy)",
    )
    serve.add_argument(
        "--allow-python",
        action="extend",
        nargs="+",
        default=[],
        metavar="MODULE",
        help="modules python: actions of uploaded graphs may import (exact names)",
    )
    serve.add_argument(
        "--allow-shell", action="store_true", help="accept shell: actions in uploaded graphs"
    )
    serve.add_argument(
        "--max-runs", type=_count, default=64, help="runs stepped at once (default %(default)s)"
    )
    serve.add_argument(
        "--lease-ttl",
        type=_positive,
        default=None,
        help="seconds a run's lease outlives a crashed server (default: env "
        "PHASEGRAPH_LEASE_TTL, else 30)",
    )
    serve.add_argument(
        "--upload-dir",
        default=str(Path(".phasegraph") / "uploads"),
        help="where uploaded graphs are kept (default %(default)s)",
    )
