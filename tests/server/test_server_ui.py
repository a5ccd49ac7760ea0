"""The run viewer's files and the graph-shape route, over a real socket (no browser).

The browser tests (test_viewer_browser.py) prove the page works; these prove what the
server promises about serving it: no token for the files and nothing else, a policy that
keeps the page to this server, files shipped in the package, and a graph route that draws
the run's graph without showing how its actions are configured.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
from test_server import FIXTURES, GATED, create, serving, settings_for, wait_for

from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


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
        modules = {"app.js", "api.js", "dom.js", "layout.js", "run.js", "runs.js"}
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
