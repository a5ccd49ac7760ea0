"""Python actions of the ``git_agent`` example: the repository, the check, the summary.

The model's git work (status, diff, add, commit) goes through the ``git`` MCP server the
graph names; these functions create the repository, check the version the model wrote
and summarise the delivery.
"""

from __future__ import annotations

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.graphs.example_repo import init_repo

__all__ = ["create_repository", "deliver", "verify"]

_WANTED = "1.1.0"


async def create_repository(ctx: ActionContext) -> ActionResult:
    """Create the repository: ``VERSION`` at 1.0.0, committed."""
    repo = await init_repo(ctx, "git", {"VERSION": "1.0.0\n"}, "Version 1.0.0")
    return ActionResult(trigger="ok", data={"repo": repo})


async def verify(ctx: ActionContext) -> ActionResult:
    """``pass`` when VERSION holds the wanted version, else ``fail`` saying what it holds."""
    found = await ctx.tool("read_file", cwd=ctx.data["repo"], path="VERSION")
    text = str(found.get("text", found.get("message", ""))).strip()
    if text == _WANTED:
        return ActionResult(trigger="pass")
    return ActionResult(trigger="fail", payload={"message": f"VERSION holds {text!r}"})


async def deliver(ctx: ActionContext) -> ActionResult:
    """Summarise the delivery: the commits on top of the first one."""
    log = await ctx.tool(
        "run_command", cwd=ctx.data["repo"], argv=["git", "log", "--format=%s", "HEAD~1..HEAD"]
    )
    commits = str(log.get("stdout", "")).strip().splitlines()
    summary = f"{len(commits)} commit(s) in {ctx.data['repo']}: {'; '.join(commits)}"
    return ActionResult(trigger="ok", data={"summary": summary, "commits": commits})
