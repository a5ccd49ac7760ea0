"""The error log as concern actions write it, and budget lookups for their messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phasegraph.actions import ActionContext
from phasegraph.actions._failures import ERROR_LOG_EVENT
from phasegraph.model import PATH_SEPARATOR

__all__ = [
    "log_error",
    "spent",
]


def log_error(
    ctx: ActionContext,
    message: str,
    *,
    severity: str = "error",
    recovered: bool = False,
    details: Mapping[str, Any] | None = None,
) -> None:
    """Add a record to the run's error log, committed with this action's step.

    Args:
        ctx: The action's context.
        message: What happened, for people.
        severity: ``warning``, ``error`` or ``critical``.
        recovered: Whether the failure was already overcome.
        details: Structured context (JSON-like values).
    """
    fields = {"message": message, "severity": severity, "recovered": recovered}
    ctx.emit(ERROR_LOG_EVENT, {**fields, "details": dict(details or {})})


def spent(ctx: ActionContext, budget: str) -> tuple[int, int | None]:
    """Units of ``budget`` spent at the level of the current state, and its limit if known.

    Counters of nested levels are prefixed with their parent path (``main/reflect``), so
    the key is the current state's parents plus the budget name.
    """
    parents, _, _ = ctx.state.rpartition(PATH_SEPARATOR)
    used = ctx.counters.get(f"{parents}/{budget}" if parents else budget, 0)
    limit = ctx.limits.get(budget)
    if limit is None:  # a nested machine's budget: only a node override tells its limit
        override = dict(ctx.settings.get("budgets") or {}).get(budget)
        limit = int(override) if override is not None else None
    return used, limit
