"""Helpers the example graphs share: a scratch git repository and commands run in it."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phasegraph.actions import ActionContext

GIT_IDENTITY = ("-c", "user.name=phasegraph", "-c", "user.email=phasegraph@example.invalid")
"""Commit as phasegraph, whatever the machine's git configuration says."""


def new_repo(kind: str, workdir: str | None, run_id: str) -> str:
    """A folder for the run's repository: under ``workdir`` if given, else a temp dir."""
    if workdir:
        folder = Path(workdir) / f"{kind}-{run_id}"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder)
    return tempfile.mkdtemp(prefix=f"phasegraph-{kind}-")


async def run_in_repo(
    ctx: ActionContext, argv: tuple[str, ...], env: Mapping[str, str]
) -> Mapping[str, Any]:
    """Run ``argv`` through the ``run_command`` tool in the run's repository."""
    return await ctx.tool("run_command", cwd=ctx.data["repo"], argv=list(argv), env=dict(env))


async def init_repo(ctx: ActionContext, kind: str, files: Mapping[str, str], message: str) -> str:
    """Create the run's repository with ``files`` committed as ``message``; its folder."""
    repo = await asyncio.to_thread(new_repo, kind, ctx.input.get("workdir"), ctx.run_id)
    for path, text in files.items():
        await ctx.tool("write_file", cwd=repo, path=path, text=text)
    for argv in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", *GIT_IDENTITY, "commit", "-q", "--allow-empty", "-m", message],
    ):
        await ctx.tool("run_command", cwd=repo, argv=argv)
    return repo
