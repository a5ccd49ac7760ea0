"""Actions: what a bound hook runs, what it sees, what it returns, how its failure is told.

The kinds are ``python:``, ``shell:``, ``http:`` and ``human:``; :class:`ActionContext` is
what an action sees and :class:`ActionResult` what it returns.

May import :mod:`phasegraph.model` and :mod:`phasegraph.errors`; owns aiohttp's client
(``_http``, loaded only when a graph binds an ``http:`` action).
"""

from __future__ import annotations

from phasegraph.actions._base import (
    Action,
    ActionContext,
    ActionResult,
    CallNext,
    EventSink,
    ToolCall,
    declare_effect,
    effect_of,
)

__all__ = [
    "Action",
    "ActionContext",
    "ActionResult",
    "CallNext",
    "EventSink",
    "ToolCall",
    "declare_effect",
    "effect_of",
]
