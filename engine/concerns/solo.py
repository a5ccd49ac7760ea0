"""Companion of the ``solo_phases`` machine: auto-advance and ``phase_changed`` events.

The machine itself caps every phase with a budget (and advances when it is spent); this
wrapper adds the softer, per-node ``with: {auto_advance_after_steps: N}``: once N steps
were taken in a phase, a ``work`` result becomes ``advance``. Wrap the agent's action::

    async def agent(ctx: ActionContext) -> ActionResult: ...
    planning = phase_action(agent)          # bind the phases' hooks to this
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from phasegraph.actions import Action, ActionContext, ActionResult
from phasegraph.errors import ActionError
from phasegraph.model import PATH_SEPARATOR, replace

__all__ = [
    "phase_action",
]

PHASES = ("planning", "building", "verification", "delivery")
"""The SOLO phases, in order."""

NEXT_PHASE: Mapping[str, str] = MappingProxyType(dict(itertools.pairwise(PHASES)))
"""Phase → the phase ``advance`` leads to (delivery has none)."""

AUTO_ADVANCE_SETTING = "auto_advance_after_steps"
"""The ``with`` key: an int for every phase, or a mapping phase → int."""

PHASE_CHANGED = "phase_changed"
"""Event recorded when an action advances the phase: ``{phase, previous, auto}``."""


def steps_in_phase(ctx: ActionContext) -> int:
    """Steps taken in the current phase, this one included (its budget's spent units).

    The phase budget is named after the phase, so its counter key is the state path.
    """
    return ctx.counters.get(ctx.state, 0)


def auto_advance_limit(settings: Mapping[str, Any], phase: str) -> int | None:
    """The auto-advance step count for ``phase`` from the node's ``with``, if any.

    Raises:
        ActionError: The setting is not a positive integer (or a mapping of them).
    """
    value = settings.get(AUTO_ADVANCE_SETTING)
    if isinstance(value, Mapping):
        value = value.get(phase)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ActionError(f"with.{AUTO_ADVANCE_SETTING} must be a positive integer, not {value!r}")
    return value


def phase_action(policy: Action) -> Action:
    """Wrap an agent action bound to the solo phases' hooks.

    The wrapped action turns ``work`` into ``advance`` once the phase has taken
    ``auto_advance_after_steps`` steps (never in delivery, the last phase), and records a
    ``phase_changed`` event whenever the phase changes (also when the phase's budget is
    spent and the machine advances by itself).
    """

    async def action(ctx: ActionContext) -> ActionResult:
        result = await policy(ctx)
        phase = ctx.state.rpartition(PATH_SEPARATOR)[2]
        following = NEXT_PHASE.get(phase)
        if following is None:
            return result
        steps = steps_in_phase(ctx)
        limit = auto_advance_limit(ctx.settings, phase)
        auto = result.trigger == "work" and limit is not None and steps >= limit
        if auto:
            result = replace(result, trigger="advance")
        # `work` on a spent phase budget is advanced by the machine itself (limits are
        # known here for the node's top-level machine only).
        budget = None if PATH_SEPARATOR in ctx.state else ctx.limits.get(phase)
        capped = result.trigger == "work" and budget is not None and steps >= budget
        if result.trigger == "advance" or capped:
            ctx.emit(PHASE_CHANGED, {"phase": following, "previous": phase, "auto": auto or capped})
        return result

    return action
