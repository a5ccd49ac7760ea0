"""Tools that actions call through ``ctx.tool(name, **arguments)``.

A :class:`ToolFactory` is built once per prepared graph; for each action call it binds a
:class:`~phasegraph.actions.ToolCall` to the node, its current state and the step's event
sink, so per-state rules (such as a phase's tool whitelist) apply to every call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from phasegraph.actions import EventSink, ToolCall
from phasegraph.errors import ActionError
from phasegraph.model import GraphDef, NodeDef

__all__ = ["Tool", "ToolFactory", "build_tools"]

Tool = Callable[..., Awaitable[Mapping[str, Any]]]
"""A tool: an async callable taking keyword arguments, returning a JSON-like mapping."""


class ToolFactory:
    """Binds tool calls to a node and state."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self._tools = dict(tools)

    def bind(self, node: NodeDef, state: str, emit: EventSink) -> ToolCall:
        """A tool caller for one action call of ``node`` in ``state``."""
        tools = self._tools

        async def call(name: str, /, **arguments: Any) -> Mapping[str, Any]:
            tool = tools.get(name)
            if tool is None:
                known = ", ".join(sorted(tools)) or "none"
                raise ActionError(f"unknown tool {name!r} (known: {known})", node_id=node.id)
            return await tool(**arguments)

        return call


def build_tools(definition: GraphDef) -> ToolFactory:
    """The tool factory for a graph."""
    return ToolFactory({})
