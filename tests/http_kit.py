"""A real HTTP server for the ``http:`` action tests (the fixture is in tests/actions)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOKEN_ENV = "PHASEGRAPH_TEST_API_TOKEN"
"""The environment variable the ``/auth`` route compares the bearer token with."""


@asynccontextmanager
async def served(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """Serve ``app`` on ``127.0.0.1`` and a free port; yield its base URL; stop on exit."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@dataclass
class Server:
    """The running server: its base URL and what it saw.

    Attributes:
        url: ``http://127.0.0.1:PORT`` (no trailing slash).
        seen: Every request to ``/echo``: method, raw path, query, content type, body.
        calls: Requests per route name.
        release: Set at teardown: ``/slow`` (and the first ``/flaky``) wait for it.
        invoices: ``/invoice`` POSTs by ``Idempotency-Key``: each key is one invoice.
    """

    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    invoices: Counter[str] = field(default_factory=Counter)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/echo/{tail:.*}", self.echo)
        app.router.add_get("/status/{code}", self.status)
        app.router.add_get("/json", self.json)
        app.router.add_get("/text", self.text)
        app.router.add_get("/big", self.big)
        app.router.add_get("/auth", self.auth)
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/flaky", self.flaky)
        app.router.add_post("/invoice", self.invoice)
        return app

    async def echo(self, request: web.Request) -> web.Response:
        seen = {
            "method": request.method,
            "raw_path": request.raw_path,
            "tail": request.match_info["tail"],
            "query": dict(request.query),
            "content_type": request.content_type,
            "body": await request.text(),
            "headers": {name.lower(): value for name, value in request.headers.items()},
        }
        self.seen.append(seen)
        return web.json_response({"ok": True})

    async def status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code}")

    async def json(self, request: web.Request) -> web.Response:
        return web.json_response({"id": 7, "items": [1, 2], "name": "café"})

    async def text(self, request: web.Request) -> web.Response:
        return web.Response(text="plain words")

    async def big(self, request: web.Request) -> web.Response:
        return web.Response(text="x" * 5000)

    async def auth(self, request: web.Request) -> web.Response:
        """200 echoing the Authorization header if it carries the token, else 401."""
        header = request.headers.get("Authorization", "")
        if header != f"Bearer {os.environ.get(TOKEN_ENV)}":
            return web.Response(status=401, text="no")
        return web.json_response({"authorization": header})

    async def slow(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.Response(text="late")

    async def invoice(self, request: web.Request) -> web.Response:
        """Makes the invoice of the request's key, then fails with a 503 the first time."""
        self.invoices[request.headers.get("Idempotency-Key", "")] += 1
        if sum(self.invoices.values()) == 1:
            return web.Response(status=503, text="made it, then fell over")
        return web.json_response({"invoices": len(self.invoices)})

    async def flaky(self, request: web.Request) -> web.Response:
        """Never answers the first call (until teardown); answers every later one."""
        self.calls["flaky"] += 1
        if self.calls["flaky"] == 1:
            await self.release.wait()
        return web.json_response({"attempt": self.calls["flaky"]})
