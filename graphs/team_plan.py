"""Actions of the ``team_plan`` graph: the folder its phases work in."""

from __future__ import annotations

import tempfile
from pathlib import Path

from phasegraph.actions import ActionContext, ActionResult

__all__ = ["workspace"]


async def workspace(ctx: ActionContext) -> ActionResult:
    """Make the folder the phases work in: the input's ``workdir``, or a new one."""
    given = ctx.input.get("workdir")
    if given:
        folder = Path(str(given)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="phasegraph-team-plan-"))
    return ActionResult(trigger="ok", data={"workdir": str(folder)})
