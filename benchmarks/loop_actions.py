"""Actions for the benchmark graphs."""

from __future__ import annotations

from phasegraph.actions import ActionContext, ActionResult

_AGAIN = ActionResult(trigger="again")
_STOP = ActionResult(trigger="stop")


async def work(ctx: ActionContext) -> ActionResult:
    """Loop until the run input's ``steps`` iterations are done."""
    return _AGAIN if ctx.counters.get("steps", 0) < ctx.input["steps"] else _STOP


_OK = ActionResult(trigger="ok")


async def ok(ctx: ActionContext) -> ActionResult:
    """Do nothing and succeed: a DAG node whose cost is the engine's alone."""
    return _OK
