"""Actions of the ``hello`` example graph."""

from __future__ import annotations

from phasegraph.actions import ActionContext, ActionResult


async def plan(ctx: ActionContext) -> ActionResult:
    """Decide what to say."""
    who = ctx.input.get("who", "world")
    return ActionResult(trigger="ok", data={"greeting": f"hello, {who}"})


def count(ctx: ActionContext) -> ActionResult:
    """Count the letters of the greeting (a sync action: runs in a worker thread)."""
    letters = sum(ch.isalpha() for ch in ctx.data["greeting"])
    return ActionResult(trigger="ok", data={"letters": letters})


async def deliver(ctx: ActionContext) -> ActionResult:
    """Combine what the two branches produced."""
    if not ctx.data.get("shouted"):
        return ActionResult(trigger="fail")
    message = f"{ctx.data['shouted']} ({ctx.data['letters']} letters)"
    return ActionResult(trigger="ok", data={"message": message})
