"""Phases of the ``team_pipeline`` example: a small team building a service in a git repo.

Each phase is a scripted stand-in for an agent: it edits files through ``ctx.tool`` and
checks its work with real commands (Python, SQLite, git), so the run is offline,
deterministic and takes seconds. ``migrate`` adds a NOT NULL column without a default
to a table that has rows, which SQLite refuses: the phase fails, its validation
(``git diff --quiet``) sees the changed schema and the committed one is restored.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.graphs.example_repo import GIT_IDENTITY, init_repo, run_in_repo

__all__ = ["announce", "api", "docs", "integrate", "migrate", "release", "scaffold", "schema"]

_APPLY_SCHEMA = (
    "import sqlite3, sys; sqlite3.connect(':memory:').executescript(open(sys.argv[1]).read())"
)
_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


async def _run(ctx: ActionContext, *argv: str) -> Mapping[str, Any]:
    return await run_in_repo(ctx, argv, _ENV)


async def _write(ctx: ActionContext, path: str, text: str) -> None:
    await ctx.tool("write_file", cwd=ctx.data["repo"], path=path, text=text)


async def _append(ctx: ActionContext, path: str, text: str) -> None:
    # An action runs at least once: after a crash before its commit it runs again, and a
    # line it already added must not be added twice.
    current = await ctx.tool("read_file", cwd=ctx.data["repo"], path=path)
    if not current["text"].endswith(text):
        await _write(ctx, path, current["text"] + text)


def _done(line: str) -> ActionResult:
    return ActionResult(trigger="ok", data={"log": [line]})


def _failed(line: str, check: Mapping[str, Any]) -> ActionResult:
    lines = (check.get("stderr") or check.get("message") or "").strip().splitlines()
    reason = lines[-1] if lines else f"exit status {check.get('exit')}"
    return ActionResult(trigger="fail", payload={"reason": reason}, data={"log": [line]})


async def scaffold(ctx: ActionContext) -> ActionResult:
    """Create the repository with a first schema and commit it."""
    files = {
        "README.md": "# orders service\n",
        "schema.sql": (
            "create table users (id integer primary key, name text not null);\n"
            "insert into users (name) values ('ada');\n"
        ),
    }
    repo = await init_repo(ctx, "team", files, "scaffold")
    return ActionResult(trigger="ok", data={"repo": repo, "log": [f"scaffold: {repo}"]})


async def schema(ctx: ActionContext) -> ActionResult:
    """Add the orders table, check the schema applies, and commit it."""
    await _append(ctx, "schema.sql", "create table orders (id integer primary key, user int);\n")
    check = await _run(ctx, sys.executable, "-c", _APPLY_SCHEMA, "schema.sql")
    if check["exit"] != 0:
        return _failed("schema: does not apply", check)
    await _run(ctx, "git", *GIT_IDENTITY, "commit", "-q", "-m", "orders table", "--", "schema.sql")
    return _done("schema: orders table committed")


async def api(ctx: ActionContext) -> ActionResult:
    """Write the API module and check that it compiles."""
    await _write(ctx, "api.py", "def list_orders(user):\n    return []\n")
    check = await _run(ctx, sys.executable, "-m", "py_compile", "api.py")
    return _done("api: list_orders") if check["exit"] == 0 else _failed("api: broken", check)


async def docs(ctx: ActionContext) -> ActionResult:
    """Document the API."""
    await _write(ctx, "docs/api.md", "# API\n\n`list_orders(user)` returns a user's orders.\n")
    return _done("docs: api.md")


async def migrate(ctx: ActionContext) -> ActionResult:
    """Add a column to users; SQLite refuses a NOT NULL column without a default."""
    await _append(ctx, "schema.sql", "alter table users add column email text not null;\n")
    check = await _run(ctx, sys.executable, "-c", _APPLY_SCHEMA, "schema.sql")
    if check["exit"] != 0:
        return _failed("migrate: the migration does not apply", check)
    return _done("migrate: email column")


async def integrate(ctx: ActionContext) -> ActionResult:
    """Run a smoke test of the API against the documented behaviour."""
    await _write(ctx, "smoke.py", "from api import list_orders\nassert list_orders(1) == []\n")
    check = await _run(ctx, sys.executable, "smoke.py")
    return (
        _done("integrate: smoke test passed")
        if check["exit"] == 0
        else _failed("integrate: smoke test failed", check)
    )


async def release(ctx: ActionContext) -> ActionResult:
    """Commit everything and tag the release."""
    await _run(ctx, "git", "add", "-A")
    await _run(ctx, "git", *GIT_IDENTITY, "commit", "-q", "-m", "release 1.0")
    await _run(ctx, "git", "tag", "v1.0")
    return _done("release: v1.0")


async def announce(ctx: ActionContext) -> ActionResult:
    """Write the changelog entry."""
    await _write(ctx, "CHANGELOG.md", "## 1.0\n\n- orders API\n")
    return _done("announce: changelog")
