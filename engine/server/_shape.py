"""``GET /runs/{run_id}/graph``: the shape of the graph a run recorded.

A viewer needs more than the run state to draw a run: the DAG's edges and layers, and each
machine's states and transitions so a node's current state can be shown in its diagram.
This route gives exactly that, read from the definition the run was started with (its
recorded built-in name or file), and says whether that definition has changed since. It
never shows how actions are configured (commands, URLs, templates): only each hook's
action kind and the triggers it declares.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from phasegraph.model import MachineDef
from phasegraph.run import PreparedGraph
from phasegraph.server._support import ENGINE, ok

__all__ = ["graph_shape", "routes"]


def _machine_view(machine: MachineDef) -> dict[str, Any]:
    return {
        "initial": machine.initial,
        "description": machine.description,
        "states": [
            {
                "name": state.name,
                "final": state.final,
                "hook": state.hook,
                "machine": state.machine,
                "description": state.description,
            }
            for state in machine.states.values()
        ],
        "transitions": [
            {
                "trigger": transition.trigger,
                "source": list(transition.source),
                "dest": transition.dest,
                "conditions": list(transition.conditions),
                "unless": list(transition.unless),
            }
            for transition in machine.transitions
        ],
    }


def graph_shape(prepared: PreparedGraph) -> dict[str, Any]:
    """Layers, nodes (machine, needs, hooks) and machines of a prepared graph, as JSON."""
    definition = prepared.definition
    return {
        "graph": definition.name,
        "description": definition.description,
        "digest": definition.digest,
        "layers": [list(layer) for layer in prepared.workflow.layers],
        "nodes": {
            node.id: {
                "machine": node.machine,
                "needs": list(node.needs),
                "hooks": {
                    hook: {"kind": action.kind, "triggers": list(action.triggers)}
                    for hook, action in node.bind.items()
                },
            }
            for node in definition.nodes
        },
        "machines": {name: _machine_view(m) for name, m in definition.machines.items()},
    }


async def get_graph(request: web.Request) -> web.Response:
    """The shape of the run's graph; ``changed`` when its definition differs from the run's."""
    engine = request.app[ENGINE]
    state = await engine.get(request.match_info["run_id"])
    prepared = engine.prepare(state.graph_source)  # cached by the engine per file and digest
    shape = graph_shape(prepared)
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
