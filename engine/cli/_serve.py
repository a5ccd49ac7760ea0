"""The ``serve`` command: run the HTTP API until SIGINT or SIGTERM.

Binding an address other than loopback needs a way to sign in — a bearer token
(``--token`` or env ``PHASEGRAPH_TOKEN``, the administrator), a token file of named,
scoped tokens (``--tokens``) or an identity provider's JWTs (``--jwt-issuer``,
``--jwt-audience``, ``--jwks``) — unless ``--insecure-no-token`` says a proxy in front
authenticates. ``--tls-cert`` and ``--tls-key`` serve HTTPS (docs/teams.md).
On a signal the server stops taking requests, ends event streams and stops every run at
its last committed step; the next ``serve`` on the same store resumes them.

With ``--queue`` (a Redis store) the server drives nothing: it commits a new run's first
step (or a reply) and puts the run in the store's work queue for ``phasegraph worker``
processes; ``--with-worker`` runs one such worker in the server's own process, so one
machine still needs one command.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import ssl
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from phasegraph.api import Engine
from phasegraph.cli._collector import tune_collector
from phasegraph.cli._handler import Handlers
from phasegraph.cli._logs import configure_logging
from phasegraph.cli._support import (
    EXIT_OK,
    cannot_listen,
    lease_ttl,
    stream_settings,
    tracer_provider,
)
from phasegraph.cli._worker import (
    default_worker_name,
    require_queue,
    worker_queue,
)
from phasegraph.errors import InputError
from phasegraph.run import RunOptions
from phasegraph.server import ServerSettings, create_app
from phasegraph.server._jwt import JwtSettings
from phasegraph.store import open_store
from phasegraph.store._open import redact_url
from phasegraph.worker import Worker, WorkerOptions

__all__ = ["HANDLERS"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _jwt_settings(args: argparse.Namespace) -> JwtSettings | None:
    given = {"--jwt-issuer": args.jwt_issuer, "--jwt-audience": args.jwt_audience}
    given["--jwks"] = args.jwks
    if not any(given.values()):
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise InputError(
            f"JWT sign-in needs --jwt-issuer, --jwt-audience and --jwks: add {missing[0]}"
        )
    return JwtSettings(
        issuer=args.jwt_issuer,
        audience=args.jwt_audience,
        jwks=args.jwks,
        name_claim=args.jwt_name_claim,
        scopes_claim=args.jwt_scopes_claim,
        groups_claim=args.jwt_groups_claim,
    )


def _settings(args: argparse.Namespace, ttl: float) -> ServerSettings:
    token = args.token or None
    jwt = _jwt_settings(args)
    tokens_file = Path(args.tokens) if args.tokens else None
    signs_in = token is not None or jwt is not None or tokens_file is not None
    if not signs_in and not _loopback(args.host) and not args.insecure_no_token:
        raise InputError(
            f"serving on {args.host} needs a bearer token, a token file or JWT sign-in: "
            "--token (or PHASEGRAPH_TOKEN), --tokens FILE or --jwt-issuer (or "
            "--insecure-no-token behind an authenticating proxy)"
        )
    return ServerSettings(
        token=token,
        tokens_file=tokens_file,
        jwt=jwt,
        trust_proxy=args.trust_proxy,
        auth_failure_burst=args.auth_failure_burst,
        host=args.host,
        allowed_hosts=frozenset(args.allowed_host),
        allowed_origins=frozenset(args.allowed_origin),
        allow_python_modules=frozenset(args.allow_python),
        allow_shell=args.allow_shell,
        max_concurrent_runs=args.max_runs,
        upload_dir=Path(args.upload_dir),
        adopt_interval=min(max(ttl / 3, 0.05), 5.0),
        queue=args.queue or args.with_worker,
        read_only=args.read_only,
        stream_retention=stream_settings(args).retention,
    )


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The server's TLS context, or ``None`` for plain HTTP."""
    if not args.tls_cert and not args.tls_key:
        return None
    if not (args.tls_cert and args.tls_key):
        raise InputError("HTTPS needs both --tls-cert and --tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except FileNotFoundError as exc:
        raise InputError(f"{exc.filename}: no such file (--tls-cert / --tls-key)") from None
    except (ssl.SSLError, OSError) as exc:
        raise InputError(
            f"cannot use --tls-cert {args.tls_cert} with --tls-key {args.tls_key}: {exc}"
        ) from None
    return context


def _one_line_for_bad_requests(record: logging.LogRecord) -> bool:
    """A request that is not valid HTTP is the client's mistake: one line, no traceback."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, HttpProcessingError):
        lines = [line.strip() for line in error.message.splitlines()]
        reason = " ".join(line for line in lines if line not in ("", "^"))  # drop the caret line
        client = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
        record.msg, record.args = (
            "refused a request from %s that is not valid HTTP: %s",
            (
                client,
                reason,
            ),
        )
        record.exc_info, record.exc_text = None, None
    return True


async def _cmd_serve(args: argparse.Namespace) -> int:
    ttl = args.lease_ttl if args.lease_ttl is not None else lease_ttl()
    settings = _settings(args, ttl)
    tls = _tls(args)
    logging.getLogger("aiohttp.server").addFilter(_one_line_for_bad_requests)
    options = RunOptions(lease_ttl=ttl)
    async with (
        open_store(args.store) as store,
        Engine(
            store,
            options=options,
            streams=stream_settings(args),
            tracer_provider=tracer_provider(args),
            trace_content=getattr(args, "otel_content", None),
        ) as engine,
    ):
        if args.read_only and (args.queue or args.with_worker):
            raise InputError("--read-only drives nothing: drop --queue and --with-worker")
        if settings.queue:
            require_queue(
                store,
                args.store,
                "--queue and --with-worker hand runs to",
                ", or serve without them to drive runs here",
            )
        app = create_app(engine, settings=settings)  # a bad token file or JWKS: said here
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, args.host, args.port, ssl_context=tls)
            await _listen(site, args.host, args.port)
            tune_collector()  # started: a refused flag or port never tunes the process
            # Only once listening: a port refused is one line, with no log lines before it.
            configure_logging(args.log_format, quiet=args.quiet)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            scheme = "https" if tls else "http"
            for address in runner.addresses:
                host, port = address[0], address[1]
                shown = f"[{host}]" if ":" in host else host
                print(f"phasegraph serving {scheme}://{shown}:{port}", flush=True)
            if not args.quiet:
                print(f"  store {redact_url(args.store)}", file=sys.stderr, flush=True)
                _say_viewer(runner.addresses, scheme, _sign_in(settings))
            if args.with_worker:
                await _embedded_worker(args, engine, ttl, stop)
            else:
                if settings.queue and not args.quiet:
                    print("  runs go to the workers' queue", file=sys.stderr, flush=True)
                if settings.read_only and not args.quiet:
                    print("  read-only: this server drives no run", file=sys.stderr, flush=True)
                await stop.wait()
        finally:
            await runner.cleanup()
    return EXIT_OK


async def _embedded_worker(
    args: argparse.Namespace, engine: Engine, ttl: float, stop: asyncio.Event
) -> None:
    """Drive queued runs in this process (as ``phasegraph worker`` would) until ``stop``."""
    name = default_worker_name()  # its lines go to the server's log (configure_logging)
    options = WorkerOptions(concurrency=args.max_runs, reclaim_after=ttl)
    async with worker_queue(engine.store) as queue:
        if not args.quiet:
            print(
                f"  runs go to the workers' queue; worker {name} in this process drives "
                f"{options.concurrency} at once",
                file=sys.stderr,
                flush=True,
            )
        await Worker(engine, queue, name=name, options=options).run(stop)


def _sign_in(settings: ServerSettings) -> str | None:
    """How the viewer's user signs in, or ``None`` when no credential is needed."""
    ways = []
    if settings.token:
        ways.append("the token given with --token or PHASEGRAPH_TOKEN")
    if settings.tokens_file:
        ways.append(f"a token of {settings.tokens_file}")
    if settings.jwt:
        ways.append(f"a JWT from {settings.jwt.issuer}")
    return " or ".join(ways) or None


def _say_viewer(addresses: list[Any], scheme: str, sign_in: str | None) -> None:
    """Where the run viewer is, and how it signs in (a secret is never printed)."""
    for host, port, *_ in addresses:
        shown = f"[{host}]" if ":" in host else host
        print(f"  viewer {scheme}://{shown}:{port}/ui", file=sys.stderr, flush=True)
    if sign_in:
        print(
            f"  the viewer asks for {sign_in} (API clients send it as "
            "'Authorization: Bearer TOKEN')",
            file=sys.stderr,
            flush=True,
        )


async def _listen(site: web.TCPSite, host: str, port: int) -> None:
    """Start listening; a port that cannot be had is bad input, said in one line."""
    try:
        await site.start()
    except OSError as exc:
        raise cannot_listen(host, port, exc) from None


HANDLERS: Handlers = MappingProxyType({"serve": _cmd_serve})
"""This module's command handlers by command name (see :mod:`phasegraph.cli._commands`)."""
