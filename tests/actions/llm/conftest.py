"""A clean model environment per test: no endpoint or key leaks in from the shell."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pytest

from model_kit import ENDPOINT_VARIABLES
from phasegraph.testing import ScriptedModelServer

Serve = Callable[..., ScriptedModelServer]


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def serve(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Serve]:
    """Start a scripted model and point PHASEGRAPH_LLM_BASE_URL at it."""
    started: list[ScriptedModelServer] = []

    async def begin(script: Sequence[Mapping[str, Any]], **options: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(script, **options)
        started.append(server)
        await server.start()
        monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", server.base_url)
        return server

    try:
        yield begin  # type: ignore[misc]
    finally:
        for server in started:
            await server.aclose()
