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
)
from phasegraph.actions._build import (
    BUILDERS,
    build_action,
)
from phasegraph.actions._failures import (
    ERROR_LOG_EVENT,
    ERROR_TRIGGER,
    classify_error,
    describe_error,
)
from phasegraph.actions._human import (
    TIMEOUT_TRIGGER,
    HumanGate,
    build_gate,
    render_payload,
)
from phasegraph.actions._shell import DEFAULT_COMMAND_TIMEOUT, build_shell_action

__all__ = [
    "BUILDERS",
    "DEFAULT_COMMAND_TIMEOUT",
    "ERROR_LOG_EVENT",
    "ERROR_TRIGGER",
    "TIMEOUT_TRIGGER",
    "Action",
    "ActionContext",
    "ActionResult",
    "CallNext",
    "EventSink",
    "HumanGate",
    "ToolCall",
    "build_action",
    "build_gate",
    "build_shell_action",
    "classify_error",
    "describe_error",
    "render_payload",
]
