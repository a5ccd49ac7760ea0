"""Browser safety and hostile uploads, over a real socket.

A web page can send simple cross-origin requests and, by DNS rebinding, read answers;
an uploaded graph can carry slow regular expressions and wild templates. None of it
may drive the server, stall it, or cost it memory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from test_server import create, serving, settings_for, wait_for

from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

HELLO = {"graph": "hello", "input": {"who": "ada"}}
PAGE = {"Origin": "http://evil.example", "Content-Type": "text/plain"}


def gate_graph(payload: str, schema: str = "") -> str:
    """A one-node graph whose human gate shows ``payload`` (and an optional input schema)."""
    return f"""
graph: gated
{schema}
nodes:
  - id: gate
    machine: task
    bind:
      run: {{human: approval, payload: {{text: "{payload}"}}, triggers: [ok, fail]}}
"""


async def run_count(client: TestClient) -> int:
    response = await client.get("/runs")
    assert response.status == 200, await response.text()
    body: Any = await response.json()
    return len(body["runs"])


async def test_a_web_page_cannot_start_runs_or_read_them(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        page = await client.post("/runs", data=b'{"graph": "hello"}', headers=PAGE)
        assert page.status == 403
        assert "--allowed-origin" in (await page.json())["detail"]
        untyped = await client.post(
            "/runs", data=b'{"graph": "hello"}', headers={"Content-Type": "text/plain"}
        )
        assert untyped.status == 415
        assert "application/json" in (await untyped.json())["detail"]
        rebound = await client.get("/runs", headers={"Host": "evil.example"})
        assert rebound.status == 421
        assert "--allowed-host" in (await rebound.json())["detail"]
        assert await run_count(client) == 0
        cli_like = await client.post("/runs", json=HELLO)
        assert cli_like.status == 201, await cli_like.text()
        same_site = await client.get("/runs", headers={"Origin": f"http://127.0.0.1:{client.port}"})
        assert same_site.status == 200
        named = await client.get("/runs", headers={"Host": f"localhost:{client.port}"})
        assert named.status == 200
        assert await run_count(client) == 1


async def test_allowed_origins_and_hosts_are_accepted(tmp_path: Path) -> None:
    settings = settings_for(
        tmp_path,
        allowed_origins=frozenset({"https://ui.example"}),
        allowed_hosts=frozenset({"proxy.example"}),
    )
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        headers = {"Origin": "https://ui.example", "Host": "proxy.example"}
        started = await client.post("/runs", json=HELLO, headers=headers)
        assert started.status == 201, await started.text()
        other = await client.post("/runs", json=HELLO, headers={"Origin": "https://x.example"})
        assert other.status == 403
        assert await run_count(client) == 1


async def test_a_backtracking_pattern_is_matched_in_linear_time(tmp_path: Path) -> None:
    schema = "input: {type: object, properties: {who: {type: string, pattern: '^(a+)+$'}}}"
    body = {"graph_yaml": gate_graph("hi", schema), "input": {"who": "a" * 40 + "!"}}
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        started, health = await asyncio.gather(
            client.post("/runs", json=body), client.get("/healthz")
        )
        assert health.status == 200
        assert started.status == 400
        assert "does not match" in (await started.json())["detail"]
        body["input"] = {"who": "a" * 40}
        assert (await client.post("/runs", json=body)).status == 201


async def test_a_backreference_pattern_is_refused_at_its_line(tmp_path: Path) -> None:
    schema = "input:\n  type: object\n  properties:\n    who: {type: string, pattern: '(a)\\1'}"
    body = {"graph_yaml": gate_graph("hi", schema), "input": {"who": "aa"}}
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        refused = await client.post("/runs", json=body)
        assert refused.status == 400
        detail = (await refused.json())["detail"]
        assert "graph_yaml:6:" in detail
        assert "backreferences" in detail


async def test_wild_templates_are_refused_when_the_graph_loads(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        for template, why in [
            ("{who:>300000000}", "format spec"),
            ("{who.__class__.__mro__}", "attributes are not filled"),
        ]:
            refused = await client.post(
                "/runs", json={"graph_yaml": gate_graph(template), "input": {"who": "ada"}}
            )
            assert refused.status == 400
            detail = (await refused.json())["detail"]
            assert "graph_yaml:8:" in detail
            assert why in detail
        assert await run_count(client) == 0


async def test_an_oversize_payload_fails_the_node(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_body_bytes=4 * 1024 * 1024)
    big = "x" * (600 * 1024)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        run_id = await create(client, gate_graph("{big}{big}"), {"big": big})
        final = await wait_for(client, run_id, lambda v: v["nodes"]["gate"]["status"] == "failed")
        assert "more than 1048576 characters" in str(final["nodes"]["gate"]["error"])
