"""``GET /runs/{run_id}/graph``: the shape of the graph a run recorded, as the run stands.

A viewer needs more than the run state to draw a run: the DAG's edges and layers, and each
machine's states and transitions so a node's current state can be shown in its diagram.
This route gives exactly that, read from the definition the run was started with (its
recorded built-in name or file), and says whether that definition has changed since. A
run's plans have made child nodes of it: the shape holds those made so far, each naming
its parent, and each parent its current plan. It never shows how actions are configured
(commands, URLs, templates) nor what a plan's items hold: only each hook's action kind and
the triggers it declares.
"""

from __future__ import annotations

from aiohttp import web

from phasegraph.run._prepare import with_plans
from phasegraph.server._support import ENGINE, ok
from phasegraph.views import graph_view

__all__ = ["routes"]


async def get_graph(request: web.Request) -> web.Response:
    """The shape of the graph the run follows (its stored definition, cached by the engine).

    ``changed`` is kept for clients of earlier versions: the shape is always the run's own.
    """
    engine = request.app[ENGINE]
    state = await engine.get(request.match_info["run_id"])
    prepared = await engine.prepared_for(state)
    # With the children the run's plans made (compiled per call: a read).
    expanded = with_plans(prepared, state.plans) if state.plans else prepared
    shape = graph_view(expanded.definition, expanded.workflow.layers, state.plans)
    return ok({"run_id": state.run_id, "changed": False, **shape})


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/runs/{run_id}/graph", get_graph, allow_head=False)]
