"""A real HTTP server on a free loopback port, for the ``http:`` action tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from http_kit import Server, served


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """A server on ``127.0.0.1`` and a free port, stopped after the test."""
    state = Server()
    # A client that gives up (a timeout) cancels its handler, so teardown never waits on it.
    async with served(state.app(), handler_cancellation=True) as state.url:
        try:
            yield state
        finally:
            state.release.set()
