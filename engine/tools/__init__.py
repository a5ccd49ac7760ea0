"""Tools that actions call through ``ctx.tool(name, **arguments)``, under per-phase rules.

The built-in tools read, write and list files and run commands.

May import :mod:`phasegraph.actions`, :mod:`phasegraph.model` and :mod:`phasegraph.errors`.
"""

from __future__ import annotations

__all__: list[str] = []
