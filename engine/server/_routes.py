"""HTTP routes that create and read runs: create, list, get, snapshot, history, errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Final

from aiohttp import web

from phasegraph.model import GraphDef, RunStatus
from phasegraph.run import PreparedGraph
from phasegraph.server._access import require_start
from phasegraph.server._principal import principal_of
from phasegraph.server._support import (
    ENGINE,
    EXECUTOR,
    GRAPHS,
    MAX_SEQ,
    SETTINGS,
    check_fields,
    fail,
    int_query,
    json_body,
    ok,
    optional_mapping,
    optional_string,
    run_id_of,
    run_json,
)
from phasegraph.server._upload import UPLOAD_FIELD, UploadPolicy, load_upload
from phasegraph.spec._catalog import builtin_graphs
from phasegraph.views import errors_view, meta_view, state_view

__all__ = ["graph_of", "routes"]

_BUILTIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
_CREATE_FIELDS: Final = frozenset({"graph", UPLOAD_FIELD, "input", "run_id"})
_MAX_PAGE: Final = 1000
_CACHED_GRAPHS: Final = 256


async def create_run(request: web.Request) -> web.Response:
    """Start a run of a built-in graph (``graph``) or of an uploaded one (``graph_yaml``)."""
    body = await json_body(request)
    check_fields(body, _CREATE_FIELDS)
    run_input = optional_mapping(body, "input")
    run_id = run_id_of(body)
    prepared = await graph_of(request, body)
    actor = principal_of(request).actor
    state = await request.app[EXECUTOR].create(prepared, run_input, run_id, actor=actor)
    return ok(
        await run_json(request.app, state),
        status=201,
        headers={"Location": f"/runs/{state.run_id}"},
    )


async def graph_of(
    request: web.Request, body: dict[str, object], *, start: bool = True
) -> PreparedGraph:
    """The graph a request names: a built-in (``graph``) or uploaded YAML (``graph_yaml``).

    ``start``: the graph is to start a run, which the principal's start scopes must cover.
    """
    name = optional_string(body, "graph", _BUILTIN_NAME)
    text = body.get(UPLOAD_FIELD)
    if (name is None) == (text is None):
        fail("body", f"give exactly one of `graph` (a built-in name) and `{UPLOAD_FIELD}`")
    if start:
        require_start(request, name)
    engine = request.app[ENGINE]
    if name is not None:
        if name not in builtin_graphs():
            known = ", ".join(builtin_graphs())
            fail("body.graph", f"no built-in graph {name!r} (built-in graphs: {known})")
        return engine.prepare(name)  # the engine keeps it until its files change
    if not isinstance(text, str) or not text.strip():
        fail(f"body.{UPLOAD_FIELD}", "expected the graph's YAML text")
    # Clients tend to upload the same graph for every run: parse each text once (the
    # engine bounds how many compiled graphs it keeps; this bounds the parsed texts).
    key = "upload:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    cache = request.app[GRAPHS]
    if key not in cache:
        cache[key] = engine.prepare(await _upload(request, text))
        while len(cache) > _CACHED_GRAPHS:
            del cache[next(iter(cache))]  # the oldest (dicts keep insertion order)
    return cache[key]


async def _upload(request: web.Request, text: str) -> GraphDef:
    settings = request.app[SETTINGS]
    policy = UploadPolicy(
        upload_dir=settings.upload_dir,
        max_bytes=settings.max_graph_bytes,
        max_depth=settings.max_graph_depth,
        allow_python_modules=settings.allow_python_modules,
        allow_shell=settings.allow_shell,
    )
    return await asyncio.to_thread(load_upload, text, policy)


async def list_runs(request: web.Request) -> web.Response:
    """Runs, most recently updated first; ``status`` filters, ``limit``/``offset`` page."""
    status_text = request.query.get("status")
    status = None
    if status_text is not None:
        if status_text not in set(RunStatus):
            known = ", ".join(s.value for s in RunStatus)
            fail("query.status", f"unknown status {status_text!r:.40} (known: {known})")
        status = RunStatus(status_text)
    limit = int_query(request, "limit", 50, 1, _MAX_PAGE) or 50
    offset = int_query(request, "offset", 0, 0, MAX_SEQ) or 0
    metas = await request.app[ENGINE].list_runs(status=status, limit=limit + 1, offset=offset)
    more = len(metas) > limit
    return ok(
        {
            "runs": [meta_view(meta) for meta in metas[:limit]],
            "limit": limit,
            "offset": offset,
            "next_offset": offset + limit if more else None,
        }
    )


async def get_run(request: web.Request) -> web.Response:
    """A run at its head: status, nodes and their machine states, interrupts, summary."""
    state = await request.app[ENGINE].get(request.match_info["run_id"])
    return ok(await run_json(request.app, state))


async def get_snapshot(request: web.Request) -> web.Response:
    """The whole run state at the head, or after step ``seq``."""
    seq = int_query(request, "seq", None, 0, MAX_SEQ)
    state = await request.app[ENGINE].get(request.match_info["run_id"], seq)
    return ok(state_view(state))


async def get_history(request: web.Request) -> web.Response:
    """Step records from ``start``, at most ``limit`` of them, oldest first."""
    run_id = request.match_info["run_id"]
    start = int_query(request, "start", 0, 0, MAX_SEQ) or 0
    limit = int_query(request, "limit", 100, 1, _MAX_PAGE) or 100
    # An unknown run raises RunNotFoundError (404); a start past the head is an empty page.
    # The records are rendered as `history --json` renders them (from the stored bytes),
    # one more than the page asked for, to say whether another page follows.
    rendered = await request.app[ENGINE].history_json(run_id, start=start, stop=start + limit + 1)
    records = json.loads(rendered)
    more = len(records) > limit
    return ok(
        {
            "run_id": run_id,
            "records": records[:limit],
            "next_start": start + limit if more else None,
        }
    )


async def get_errors(request: web.Request) -> web.Response:
    """The run's error log: failures, recoveries and emergencies, oldest first."""
    state = await request.app[ENGINE].get(request.match_info["run_id"])
    return ok(errors_view(state))


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [
        web.post("/runs", create_run),
        web.get("/runs", list_runs, allow_head=False),
        web.get("/runs/{run_id}", get_run, allow_head=False),
        web.get("/runs/{run_id}/snapshot", get_snapshot, allow_head=False),
        web.get("/runs/{run_id}/history", get_history, allow_head=False),
        web.get("/runs/{run_id}/errors", get_errors, allow_head=False),
    ]
