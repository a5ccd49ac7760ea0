"""``phasegraph serve`` logs one line per request and per run event, never the token."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_server import FIXTURES, GATED

from builders import serve_command

TOKEN = "s3cret-token-never-logged"


class _Serve:
    """A ``phasegraph serve`` process whose stderr (its log) is read line by line."""

    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url
        self.lines: list[str] = []

    async def line_where(self, wanted: Callable[[str], bool]) -> str:
        """The first log line (read so far or to come) that ``wanted`` accepts."""
        assert self.process.stderr is not None
        async with asyncio.timeout(30):
            for line in self.lines:
                if wanted(line):
                    return line
            while True:
                raw = await self.process.stderr.readline()
                assert raw, "the server's log ended:\n" + "".join(self.lines)
                self.lines.append(raw.decode())
                if wanted(self.lines[-1]):
                    return self.lines[-1]


async def _serve(tmp_path: Path, *options: str) -> AsyncIterator[_Serve]:
    path = [str(FIXTURES), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PHASEGRAPH_TOKEN": TOKEN}
    async with serve_command(
        "--store",
        f"sqlite:///{tmp_path / 'runs.db'}",
        "--port",
        "0",
        "--allow-python",
        "gate_actions",
        "phasegraph.concerns.spec",
        "--upload-dir",
        str(tmp_path / "uploads"),
        *options,
        cwd=tmp_path,
        env=env,
    ) as (process, address):
        assert address.startswith("http://"), address
        yield _Serve(process, address)


@pytest.fixture
async def json_server(tmp_path: Path) -> AsyncIterator[_Serve]:
    async for server in _serve(tmp_path, "--log-format", "json"):
        yield server


def _record(line: str) -> dict[str, Any]:
    try:
        parsed = json.loads(line)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


async def test_json_log_has_requests_and_run_events_but_never_the_token(
    json_server: _Serve,
) -> None:
    server = json_server
    viewer = await server.line_where(lambda line: "/ui" in line)
    assert f"viewer {server.url}/ui" in viewer
    await server.line_where(lambda line: "asks for the token" in line)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(server.url, headers=headers) as client:
        async with client.post("/runs", json={"graph_yaml": GATED, "input": {"topic": "x"}}) as r:
            assert r.status == 201, await r.text()
            run_id = (await r.json())["run_id"]
        gate = _record(
            await server.line_where(lambda line: _record(line).get("event") == "run_gate_open")
        )
        assert (gate["run_id"], gate["graph"], gate["node"]) == (run_id, "gated", "spec")
        interrupt_id = gate["interrupt_id"]
        reply = {"interrupt_id": interrupt_id, "trigger": "confirm"}
        async with client.post(f"/runs/{run_id}/reply", json=reply) as r:
            assert r.status == 200, await r.text()
        async with client.get("/runs/nope") as r:
            assert r.status == 404

    started = _record(
        await server.line_where(lambda line: _record(line).get("event") == "run_started")
    )
    assert started["run_id"] == run_id
    replied = _record(
        await server.line_where(lambda line: _record(line).get("event") == "run_reply")
    )
    assert (replied["run_id"], replied["outcome"]) == (run_id, "confirm")
    ended = _record(
        await server.line_where(lambda line: _record(line).get("event") == "run_completed")
    )
    assert (ended["run_id"], ended["status"]) == (run_id, "completed")
    missing = _record(
        await server.line_where(lambda line: _record(line).get("path") == "/runs/nope")
    )
    assert missing["event"] == "request"
    assert (missing["method"], missing["status"], missing["client"]) == ("GET", 404, "127.0.0.1")
    assert isinstance(missing["duration_ms"], float)
    created = _record(
        await server.line_where(
            lambda line: _record(line).get("path") == "/runs" and _record(line).get("status")
        )
    )
    assert (created["method"], created["status"]) == ("POST", 201)
    assert not any(TOKEN in line for line in server.lines)


async def test_text_log_is_the_default_and_refusals_are_logged(tmp_path: Path) -> None:
    async for server in _serve(tmp_path):
        async with (
            aiohttp.ClientSession(server.url) as client,
            client.get("/runs", headers={"Authorization": "Bearer wrong"}) as r,
        ):
            assert r.status == 401
        line = await server.line_where(lambda line: "GET /runs 401" in line)
        assert "client=127.0.0.1" in line
        assert "wrong" not in line
        assert _record(line) == {}  # plain text, not JSON


async def test_cancel_is_logged(json_server: _Serve) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(json_server.url, headers=headers) as client:
        async with client.post("/runs", json={"graph_yaml": GATED, "input": {"topic": "x"}}) as r:
            run_id = (await r.json())["run_id"]
        async with client.post(f"/runs/{run_id}/cancel", json={"reason": "no longer needed"}) as r:
            assert r.status == 200, await r.text()
    cancelled = _record(
        await json_server.line_where(lambda line: _record(line).get("event") == "run_cancel")
    )
    assert (cancelled["run_id"], cancelled["outcome"]) == (run_id, "no longer needed")
    assert cancelled["status"] == "cancelled"
