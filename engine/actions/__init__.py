"""Actions: what a bound hook runs, what it sees, what it returns, how its failure is told.

The kinds are ``python:``, ``shell:``, ``http:`` and ``human:``; :class:`ActionContext` is
what an action sees and :class:`ActionResult` what it returns; :class:`ProviderError` is
what an action raises when a model provider failed it.

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
from phasegraph.actions._failures import ProviderError

__all__ = [
    "Action",
    "ActionContext",
    "ActionResult",
    "CallNext",
    "EventSink",
    "ProviderError",
    "ToolCall",
    "declare_effect",
    "effect_of",
]
