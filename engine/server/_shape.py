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

from phasegraph.errors import RunStateError
from phasegraph.model import RunState
from phasegraph.run import PreparedGraph
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
    changed = False
    expanded = _as_it_stands(prepared, state, changed)
    plans = state.plans if expanded is not prepared else {}
    shape = graph_view(expanded.definition, expanded.workflow.layers, plans)
    return ok({"run_id": state.run_id, "changed": changed, **shape})


def _as_it_stands(prepared: PreparedGraph, state: RunState, changed: bool) -> PreparedGraph:
    """``prepared`` with the children the run's plans made (compiled per call: a read)."""
    if not state.plans:
        return prepared
    try:
        return with_plans(prepared, state.plans)
    except RunStateError:
        # A definition changed since the run started may lack a node that planned, or
        # its plan binding: it is drawn as it is now, without the children (the run
        # state still lists them). With the run's own definition this is a bug: raise.
        if not changed:
            raise
        return prepared


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/runs/{run_id}/graph", get_graph, allow_head=False)]
