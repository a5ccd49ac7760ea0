"""``GET /runs/{run_id}/graph``: the shape of the graph a run recorded.

A viewer needs more than the run state to draw a run: the DAG's edges and layers, and each
machine's states and transitions so a node's current state can be shown in its diagram.
This route gives exactly that, read from the definition the run was started with (its
recorded built-in name or file), and says whether that definition has changed since. It
never shows how actions are configured (commands, URLs, templates): only each hook's
action kind and the triggers it declares.
"""

from __future__ import annotations

from aiohttp import web

from phasegraph.server._support import ENGINE, ok
from phasegraph.views import graph_view

__all__ = ["routes"]


async def get_graph(request: web.Request) -> web.Response:
    """The shape of the run's graph; ``changed`` when its definition differs from the run's."""
    engine = request.app[ENGINE]
    state = await engine.get(request.match_info["run_id"])
    prepared = engine.prepare(state.graph_source)  # cached by the engine per file and digest
    shape = graph_view(prepared.definition, prepared.workflow.layers)
    return ok(
        {
            "run_id": state.run_id,
            "changed": prepared.definition.digest != state.graph_digest,
            **shape,
        }
    )


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/runs/{run_id}/graph", get_graph, allow_head=False)]
