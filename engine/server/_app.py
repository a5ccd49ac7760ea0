"""The HTTP API: an aiohttp application over one :class:`~phasegraph.api.Engine`.

:func:`create_app` builds it. Routes only parse, call the engine (through the
:class:`~phasegraph.server._exec.Executor` for anything that steps a run) and render JSON;
requests a web page could have made are refused first (:mod:`~phasegraph.server._guard`),
then each request is authenticated and its route's scope checked
(:mod:`~phasegraph.server._access`);
errors are mapped in one middleware from :class:`~phasegraph.errors.ErrorCode` to an HTTP
status with an ``application/problem+json`` body. ``specs/openapi.yaml`` describes every
route. Runs the server starts, resumes or is answered about execute as tasks it owns, under
one concurrency limit; on start-up it resumes the runs left ``running`` and re-arms the
review deadlines of waiting ones; on shutdown it stops them at their last committed step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from phasegraph.api import Engine
from phasegraph.errors import ErrorCode, PhasegraphError
from phasegraph.server import _access as server_access
from phasegraph.server import _control as server_control
from phasegraph.server import _events as server_events
from phasegraph.server import _gate_files as server_gate_files
from phasegraph.server import _routes as server_routes
from phasegraph.server import _shape as server_shape
from phasegraph.server import _ui as server_ui
from phasegraph.server._access import AUTHENTICATOR, Authenticator, access_guard, forbidden
from phasegraph.server._exec import Executor, ExecutorOptions
from phasegraph.server._feed import EventHub
from phasegraph.server._guard import browser_guard
from phasegraph.server._principal import ScopeMissing
from phasegraph.server._proxy import forwarded_by_proxy
from phasegraph.server._support import (
    ENGINE,
    EXECUTOR,
    GRAPHS,
    HUB,
    SETTINGS,
    ServerSettings,
    ok,
    problem,
)
from phasegraph.worker import work_queue_of

__all__ = ["STATUS_FOR", "ServerSettings", "create_app"]

_log = logging.getLogger("phasegraph.server")
_requests = logging.getLogger("phasegraph.server.requests")

STATUS_FOR: Final[Mapping[ErrorCode, int]] = {
    ErrorCode.PHASEGRAPH: 500,
    ErrorCode.SPEC: 400,
    ErrorCode.DEFINITION_UNAVAILABLE: 409,
    ErrorCode.INPUT: 400,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.RUN_NOT_FOUND: 404,
    ErrorCode.RUN: 409,
    ErrorCode.RUN_STATE: 409,
    ErrorCode.NOT_A_REVIEWER: 403,
    ErrorCode.GATE_ANSWERED: 409,
    ErrorCode.STALE_REPLY: 409,
    ErrorCode.RUN_BUSY: 409,
    ErrorCode.ILLEGAL_TRIGGER: 409,
    ErrorCode.BUDGET_EXHAUSTED: 409,
    ErrorCode.SPEND_REFUSED: 409,
    ErrorCode.ACTION_FAILED: 409,
    ErrorCode.ACTION_TIMEOUT: 409,
    ErrorCode.DATA_CONFLICT: 409,
    ErrorCode.LOOP_DETECTED: 409,
    ErrorCode.LEASE_HELD: 409,
    ErrorCode.LEASE_LOST: 409,
    ErrorCode.SEQUENCE_CONFLICT: 409,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.STORE: 500,
    ErrorCode.JOURNAL_HEAD: 500,
    ErrorCode.CODEC: 500,
    ErrorCode.UNSUPPORTED_FORMAT: 500,
}
"""HTTP status for every error code (client input errors never reach the codec: 500)."""

_READY_PROBE: Final = 5.0
_KEPT_HEADERS: Final = ("WWW-Authenticate", "Allow", "Retry-After")


@web.middleware
async def _request_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One line per request: method, path, status, duration, client (never a header).

    The path is logged without its query string, and no header is: the bearer token
    travels in one and must never reach a log.
    """
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:  # a redirect or a refusal raised past the problems
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client went away first (nginx's code for it)
        raise
    finally:
        if _requests.isEnabledFor(logging.INFO):
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            client = request.remote or "-"
            _requests.info(
                "%s %s %d %.1fms client=%s",
                request.method,
                request.path,
                status,
                duration_ms,
                client,
                extra={
                    "fields": {
                        "event": "request",
                        "method": request.method,
                        "path": request.path,
                        "status": status,
                        "duration_ms": duration_ms,
                        "client": client,
                    }
                },
            )


@web.middleware
async def _problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every error to one problem+json response: the only place that does."""
    try:
        return await handler(request)
    except ScopeMissing as exc:  # a route found the principal may not do this (403)
        return forbidden(exc)
    except PhasegraphError as exc:
        status = STATUS_FOR[exc.code]
        if status >= 500:
            _log.error("%s %s failed: %s", request.method, request.path, exc)
        title = exc.code.replace("_", " ")
        response = problem(status, title, exc.message, code=exc.code, extra=exc.context())
        if status == 503:
            response.headers["Retry-After"] = "1"
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = exc.reason.lower().replace(" ", "_")
        response = problem(exc.status, exc.reason, exc.text or exc.reason, code=code)
        for name in _KEPT_HEADERS:
            if name in exc.headers:
                response.headers[name] = exc.headers[name]
        return response
    except Exception:
        _log.exception("%s %s failed", request.method, request.path)
        return problem(500, "internal error", "the server failed; see its log", code="internal")


async def health(request: web.Request) -> web.Response:
    """Liveness: the process answers."""
    return ok({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    """Readiness: the store answers and the runs found at start-up were taken care of."""
    executor = request.app[EXECUTOR]
    if not executor.recovered.is_set():
        return problem(503, "starting", "still recovering runs", code="starting")
    try:
        async with asyncio.timeout(_READY_PROBE):
            await request.app[ENGINE].list_runs(limit=1)
    except TimeoutError:
        return problem(503, "store unavailable", "the store did not answer", code="not_ready")
    return ok({"status": "ready", **executor.stats()})


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    """Own the executor and the event hub for as long as the app runs."""
    engine, settings = app[ENGINE], app[SETTINGS]
    app[HUB] = EventHub(engine.bus)
    queue = work_queue_of(engine.store) if settings.queue else None
    executor = Executor(
        engine,
        ExecutorOptions(
            max_runs=settings.max_concurrent_runs,
            adopt_interval=settings.adopt_interval,
            queue=queue,
            read_only=settings.read_only,
        ),
    )
    app[EXECUTOR] = executor
    executor.start()
    try:
        yield
    finally:
        app[HUB].close()
        # Shielded: a cancelled shutdown must still leave every run at a committed step.
        await asyncio.shield(executor.aclose())
        if queue is not None:
            await queue.aclose()


async def _end_streams(app: web.Application) -> None:
    """End every event stream first, so connections can close without a timeout."""
    if HUB in app:
        app[HUB].close()


def create_app(engine: Engine, *, settings: ServerSettings | None = None) -> web.Application:
    """Build the HTTP application.

    Args:
        engine: The engine (and store) the server works on. The caller opens and closes
            the store; the app owns the tasks it starts.
        settings: Token, limits, intervals, upload folder (default: ``ServerSettings()``).

    Returns:
        The application, ready for ``web.AppRunner`` or ``web.run_app``.
    """
    config = settings or ServerSettings()
    guard = browser_guard(config.host, config.allowed_hosts, config.allowed_origins)
    authenticator = Authenticator(config)
    access = access_guard(authenticator)
    proxy = [forwarded_by_proxy()] if config.trust_proxy else []
    middlewares = [*proxy, _request_log, _problems, guard, access]
    app = web.Application(middlewares=middlewares, client_max_size=config.max_body_bytes)
    app[ENGINE] = engine
    app[SETTINGS] = config
    app[AUTHENTICATOR] = authenticator
    app[GRAPHS] = {}
    app.add_routes(
        [
            web.get("/healthz", health, allow_head=False),
            web.get("/readyz", ready, allow_head=False),
            *server_routes.routes(),
            *server_control.routes(),
            *server_events.routes(),
            *server_shape.routes(),
            *server_gate_files.routes(),
            *server_ui.routes(),
            *server_access.routes(),
        ]
    )
    server_access.check_table(app)
    app.cleanup_ctx.append(_lifetime)
    app.on_shutdown.append(_end_streams)
    return app
