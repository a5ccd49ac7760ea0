"""A run whose action cancels it, driven by the server: it ends ``cancelled``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from builders import TESTS
from phasegraph.api import Engine
from phasegraph.server import ServerSettings, create_app
from phasegraph.store.memory import MemoryStore

FIXTURES = TESTS / "fixtures" / "interrupt"


async def test_an_action_that_cancels_its_run_ends_it_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    settings = ServerSettings(
        upload_dir=tmp_path / "uploads",
        allow_python_modules=frozenset({"interrupt_actions"}),
        poll_interval=0.05,
        adopt_interval=0.05,
    )
    graph_yaml = (FIXTURES / "cancel.yaml").read_text(encoding="utf-8")
    async with MemoryStore() as store:
        app = create_app(Engine(store), settings=settings)
        async with TestClient(TestServer(app)) as client:
            created = await client.post("/runs", json={"graph_yaml": graph_yaml, "input": {}})
            assert created.status == 201, await created.text()
            run_id = (await created.json())["run_id"]
            # Bounded only so that a run left `running` fails the test instead of hanging it.
            async with asyncio.timeout(15):
                while True:
                    view = await (await client.get(f"/runs/{run_id}")).json()
                    if not view["driving"]:
                        break
                    await asyncio.sleep(0.02)
    assert view["status"] == "cancelled"
    assert view["nodes"]["work"]["error"] == "cancelled by the action of node 'work'"
