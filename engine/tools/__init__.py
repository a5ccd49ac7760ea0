"""Tools that actions call through ``ctx.tool(name, **arguments)``, under per-phase rules.

The built-in tools read, write and list files and run commands.

May import :mod:`phasegraph.actions`, :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.tools._registry import (
    ADVANCE_TOOL,
    ALL_TOOLS,
    BUILTIN_TOOLS,
    PHASE_VIOLATION,
    PRESETS,
    PhaseRule,
    ToolFactory,
    ToolPolicy,
    build_tools,
    command_violation,
    parse_policy,
)

__all__ = [
    "ADVANCE_TOOL",
    "ALL_TOOLS",
    "BUILTIN_TOOLS",
    "PHASE_VIOLATION",
    "PRESETS",
    "PhaseRule",
    "ToolFactory",
    "ToolPolicy",
    "build_tools",
    "command_violation",
    "parse_policy",
]
