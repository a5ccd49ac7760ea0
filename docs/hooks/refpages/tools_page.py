"""The built-in tools agents call through a ``tools:`` action."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from phasegraph.cli._describe import builtin_tools, describe_tool
from refpages._described import description_markdown
from refpages._markdown import generated_from

__all__ = ["page", "render"]


def render(tools: Mapping[str, Callable[..., Any]]) -> str:
    """The page for ``tools`` (name -> tool function)."""
    parts = [
        "# Built-in tools",
        "",
        "The tools every graph has: a `tools:` action calls them for a model, and a "
        "`python:` action through `ctx.tool(name, **arguments)`. A node's "
        "`with: {workspace: ..., phases: ...}` decides where each may be called. "
        "`phasegraph tools` prints the same descriptions in a terminal.",
        "",
        generated_from("phasegraph.tools"),
    ]
    parts += [
        description_markdown(describe_tool(name, tool)) for name, tool in sorted(tools.items())
    ]
    return "\n".join(parts)


def page() -> str:
    """The page for every built-in tool."""
    return render(builtin_tools())
