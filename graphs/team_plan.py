"""Actions of the ``team_plan`` graph: the folder its phases work in, and the goal."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from phasegraph.actions import ActionContext, ActionResult

__all__ = ["DEFAULT_GOAL", "workspace"]

DEFAULT_GOAL = "a small calculator package, with tests, a README and a zip to ship"
"""What the planner plans when the input names no goal (the shipped script's plan)."""


async def workspace(ctx: ActionContext) -> ActionResult:
    """Make the folder the phases work in (the input's ``workdir``, or a new one).

    Also settles the goal the planner is asked about: the input's, or :data:`DEFAULT_GOAL`.
    """
    given = ctx.input.get("workdir")
    folder = await asyncio.to_thread(_folder, None if given is None else str(given))
    goal = str(ctx.input.get("goal") or DEFAULT_GOAL)
    return ActionResult(trigger="ok", data={"workdir": str(folder), "goal": goal})


def _folder(given: str | None) -> Path:
    if given is None:
        return Path(tempfile.mkdtemp(prefix="phasegraph-team-plan-"))
    folder = Path(given).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder
