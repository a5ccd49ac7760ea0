"""The run viewer's files and the graph-shape route, over a real socket (no browser).

The browser tests (test_viewer_browser.py) prove the page works; these prove what the
server promises about serving it: no token for the files and nothing else, a policy that
keeps the page to this server, files shipped in the package, and a graph route that draws
the run's graph without showing how its actions are configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_server import FIXTURES, GATED, create, serving, settings_for, wait_for

from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PLANNED = (FIXTURES / "planned.yaml").read_text(encoding="utf-8")


def _shipped() -> set[str]:
    folder = resources.files("phasegraph.server").joinpath("ui")
    return {entry.name for entry in folder.iterdir() if entry.is_file()}


async def test_the_page_and_its_files_load_without_the_token_and_nothing_else_does(
    tmp_path: Path,
) -> None:
    async with (
        MemoryStore() as store,
        serving(Engine(store), settings_for(tmp_path, token=TOKEN)) as client,
    ):
        page = await client.get("/ui")
        assert page.status == 200
        assert page.content_type == "text/html"
        html = await page.text()
        # Every file the page loads is served, from this server, with the right type.
        loaded = re.findall(r'(?:src|href)="(/ui/[^"]+)"', html)
        assert {"/ui/app.js", "/ui/style.css"} <= set(loaded)
        for path in loaded:
            response = await client.get(path)
            assert response.status == 200, path
            assert response.content_type in ("text/javascript", "text/css")
        modules = {"app.js", "api.js", "dom.js", "layout.js", "plans.js", "run.js", "runs.js"}
        for name in modules:
            response = await client.get(f"/ui/{name}")
            assert response.status == 200, name
            imports = re.findall(r'from "\./([^"]+)"', await response.text())
            assert set(imports) <= _shipped(), name
        policy = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        packed = await client.get("/ui/run.js", headers={"Accept-Encoding": "gzip"})
        assert packed.headers["Content-Encoding"] == "gzip"
        again = await client.get("/ui", headers={"If-None-Match": page.headers["ETag"]})
        assert again.status == 304
        # With a trailing slash, the same page, as public.
        slash = await client.get("/ui/")
        assert slash.status == 200
        assert await slash.read() == await page.read()
        assert slash.headers["Content-Security-Policy"] == policy

        missing = await client.get("/ui/secrets.txt")
        assert missing.status == 404
        # Neither the viewer's prefix nor a path that leaves it opens the API.
        for sneaky in ("/ui/..%2Fruns", "/ui/%2E%2E/runs", "/ui/../runs", "/uiruns", "/ui%2Fruns"):
            response = await client.get(sneaky)
            assert response.status in (401, 404), sneaky
            assert "runs" not in (await response.json())
        assert (await client.get("/runs")).status == 401
        assert (await client.get("/runs", headers=AUTH)).status == 200


async def test_the_page_is_refused_to_a_rebound_host(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        rebound = await client.get("/ui/app.js", headers={"Host": "evil.example"})
        assert rebound.status == 421


def test_the_files_are_package_data() -> None:
    assert {"index.html", "app.js", "style.css"} <= _shipped()
    total = sum(
        len(resources.files("phasegraph.server").joinpath("ui", name).read_bytes())
        for name in _shipped()
    )
    assert total < 150_000  # hand-written, no bundled framework


async def test_graph_route_draws_the_runs_graph_without_action_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, GATED, {"topic": "shapes"})
        await wait_for(client, run_id, lambda v: v["status"] == "waiting")
        response = await client.get(f"/runs/{run_id}/graph")
        assert response.status == 200, await response.text()
        shape = await response.json()
        assert shape["run_id"] == run_id
        assert shape["changed"] is False
        assert shape["layers"] == [["spec"], ["build"]]
        assert shape["nodes"]["build"]["needs"] == ["spec"]
        gate = shape["nodes"]["spec"]["hooks"]["spec_review"]
        assert gate == {"kind": "human", "triggers": ["confirm", "reject", "timeout"]}
        review = shape["machines"]["spec_review"]
        pending = [t for t in review["transitions"] if "review_pending" in t["source"]]
        assert {t["trigger"] for t in pending} >= {"confirm", "reject", "timeout"}
        assert "task" in shape["machines"]
        assert "gate_actions" not in await response.text()  # no action settings shown

        missing = await client.get("/runs/nope/graph")
        assert missing.status == 404


async def _graph(client: TestClient, run_id: str) -> tuple[dict[str, Any], str]:
    response = await client.get(f"/runs/{run_id}/graph")
    assert response.status == 200, await response.text()
    return await response.json(), await response.text()


async def _plan(client: TestClient, run_id: str, items: list[dict[str, Any]]) -> None:
    """Answer the plan gate of ``planned.yaml`` with ``items`` as the plan."""
    body = {"interrupt_id": f"{run_id}:phases:plan", "trigger": "planned", "data": {"plan": items}}
    response = await client.post(f"/runs/{run_id}/reply", json=body)
    assert response.status == 200, await response.text()


def _ended(node: str, status: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a run view waits again (or finished) once ``node`` reached ``status``."""
    return lambda v: v["status"] != "running" and v["nodes"].get(node, {}).get("status") == status


async def test_graph_route_draws_the_children_the_runs_plans_made_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        # From the file (an uploaded graph may not plan): it waits at the plan's gate.
        run_id = (await Engine(store).run(FIXTURES / "planned.yaml", {})).run_id
        shape, _ = await _graph(client, run_id)
        assert shape["layers"] == [["phases"], ["report"]]  # no plan yet: no children
        assert shape["nodes"]["phases"]["plan"] is None
        assert shape["nodes"]["phases"]["hooks"]["children"]["kind"] == "plan"
        assert {node["parent"] for node in shape["nodes"].values()} == {None}

        first = [{"id": "a", "note": "an item's own words"}, {"id": "b", "needs": ["a"]}]
        await _plan(client, run_id, [*first, {"id": "bad", "fail": True}])
        await wait_for(client, run_id, _ended("phases.bad", "failed"))  # back at the gate
        shape, text = await _graph(client, run_id)
        assert shape["layers"] == [["phases.a", "phases.bad"], ["phases.b"], ["phases"], ["report"]]
        nodes = shape["nodes"]
        assert {n: nodes[n]["parent"] for n in nodes if nodes[n]["parent"]} == {
            "phases.a": "phases",
            "phases.b": "phases",
            "phases.bad": "phases",
        }
        assert nodes["phases.b"]["needs"] == ["phases.a"]
        assert nodes["phases.b"]["machine"] == "task"
        assert nodes["phases.b"]["hooks"] == {"run": {"kind": "python", "triggers": ["ok", "fail"]}}
        assert nodes["phases"]["plan"] == {
            "hook": "children",
            "version": 1,
            "members": ["phases.a", "phases.b", "phases.bad"],
            "limit": 0,
        }
        assert "an item's own words" not in text  # what an item holds is not shown

        await _plan(client, run_id, [{"id": "fix"}, {"id": "c", "needs": ["fix"]}])
        await wait_for(client, run_id, lambda v: v["status"] == "completed")
        shape, _ = await _graph(client, run_id)
        plan = shape["nodes"]["phases"]["plan"]
        assert plan["version"] == 2
        assert plan["members"] == ["phases.a", "phases.b", "phases.fix", "phases.c"]
        # The failed child is no member of the new version, but still a node of the run.
        assert shape["nodes"]["phases.bad"]["parent"] == "phases"
        assert shape["layers"][-2:] == [["phases"], ["report"]]


async def test_graph_route_draws_the_stored_definition_with_its_children_after_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    graph = tmp_path / "planned.yaml"
    graph.write_text(PLANNED, encoding="utf-8")
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        state = await Engine(store).run(graph, {})
        await _plan(client, state.run_id, [{"id": "a"}])
        await wait_for(client, state.run_id, lambda v: v["status"] == "completed")
        # The node that planned is renamed in the file: the run's own definition is drawn.
        graph.write_text(PLANNED.replace("phases", "stages"), encoding="utf-8")
        shape, _ = await _graph(client, state.run_id)
        assert shape["changed"] is False
        assert shape["digest"] == state.graph_digest
        assert "stages" not in shape["nodes"]
        assert shape["nodes"]["phases"]["plan"] is not None
        assert shape["nodes"]["phases.a"]["parent"] == "phases"
