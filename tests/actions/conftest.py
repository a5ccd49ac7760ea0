"""A real HTTP server on a free loopback port, for the ``http:`` action tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from http_kit import Server


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """A server on ``127.0.0.1`` and a free port, stopped after the test."""
    state = Server()
    # A client that gives up (a timeout) cancels its handler, so teardown never waits on it.
    runner = web.AppRunner(state.app(), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()
