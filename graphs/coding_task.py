"""Actions of the ``coding_task`` example: a scripted agent implements a function.

The agent here is a deterministic scripted policy, the stand-in for a model: it plans
from what it reads, drafts an implementation with a typical slip (it skips the first
element), and after the quality loop's reflection hands it the failing test it writes the
corrected version. Everything else is real: a git repository in a temporary folder,
files written through ``ctx.tool`` under the SOLO phase rules, pytest runs, a commit.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns.solo import phase_action
from phasegraph.errors import ActionError
from phasegraph.graphs.example_repo import GIT_IDENTITY, init_repo, run_in_repo

__all__ = [
    "create_repository",
    "deliver",
    "delivery",
    "execute",
    "plan",
    "planning",
    "verification",
    "verify",
]

# No stray bytecode in the repository; no third-party pytest plugins (faster, offline).
_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
_PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")

_STUB = '''"""Small arithmetic helpers."""


def total(values):
    """Return the sum of ``values`` (0 when there are none)."""
    raise NotImplementedError
'''

_TESTS = """from calc import total


def test_total_of_three():
    assert total([1, 2, 3]) == 6


def test_total_of_nothing():
    assert total([]) == 0
"""

_FIRST_DRAFT = '''"""Small arithmetic helpers."""


def total(values):
    """Return the sum of ``values`` (0 when there are none)."""
    result = 0
    for value in values[1:]:
        result += value
    return result
'''

_FIXED = '''"""Small arithmetic helpers."""


def total(values):
    """Return the sum of ``values`` (0 when there are none)."""
    return sum(values)
'''


async def _run(ctx: ActionContext, *argv: str) -> Mapping[str, Any]:
    return await run_in_repo(ctx, argv, _ENV)


async def create_repository(ctx: ActionContext) -> ActionResult:
    """Create the repository: a stub ``calc.total`` and its tests, committed.

    Raises:
        ActionError: pytest, which verifies the work, is not installed (said up front,
            rather than as a verification that fails for no visible reason).
    """
    if importlib.util.find_spec("pytest") is None:
        raise ActionError(
            f"this example verifies its work with pytest, which is not installed for "
            f"{sys.executable}: install it ({sys.executable} -m pip install pytest) and run "
            "again"
        )
    files = {"calc.py": _STUB, "test_calc.py": _TESTS}
    repo = await init_repo(ctx, "coding", files, "calc: stub and tests")
    return ActionResult(trigger="ok", data={"repo": repo})


async def plan(ctx: ActionContext) -> ActionResult:
    """Write the spec the reviewer sees; after a rejection, address the feedback."""
    spec = (
        "Implement calc.total(values): return the sum of the values, 0 for an empty list. "
        "Change calc.py only; done when test_calc.py passes under pytest."
    )
    feedback = ctx.payload.get("feedback")
    if feedback:
        spec += f" Revised for the reviewer: {feedback}."
    return ActionResult(trigger="generated", data={"spec": spec})


async def _plan_the_change(ctx: ActionContext) -> ActionResult:
    if ctx.payload.get("read"):
        # Second planning step: nothing left to read; the phase advances by itself
        # (auto_advance_after_steps: 2).
        return ActionResult(trigger="work", payload={"ready": True})
    repo = ctx.data["repo"]
    listing = await ctx.tool("list_files", cwd=repo)
    stub = await ctx.tool("read_file", cwd=repo, path="calc.py")
    await ctx.tool("read_file", cwd=repo, path="test_calc.py")
    # An eager model edits before it has a plan; the planning phase refuses the write.
    early = await ctx.tool("write_file", cwd=repo, path="calc.py", text="# TODO: total\n")
    steps = [
        f"files: {', '.join(listing['files'])}",
        "calc.total raises NotImplementedError" if "NotImplementedError" in stub["text"] else "",
        f"an early edit was refused ({early.get('error', 'allowed')})",
    ]
    return ActionResult(
        trigger="work",
        data={"plan": [s for s in steps if s]},
        payload={"read": listing["files"]},
    )


planning = phase_action(_plan_the_change)
"""The planning phase: read the code and tests (writes are refused here)."""


async def execute(ctx: ActionContext) -> ActionResult:
    """Write the implementation: the first draft, or the fix once a reflection arrived."""
    reflected = "reflection" in ctx.payload
    text = _FIXED if reflected else _FIRST_DRAFT
    await ctx.tool("write_file", cwd=ctx.data["repo"], path="calc.py", text=text)
    drafts = [*ctx.data.get("attempts", []), "fixed after reflection" if reflected else "draft"]
    return ActionResult(trigger="done", data={"attempts": drafts}, payload={"draft": len(drafts)})


def _failures(output: str) -> str:
    """The failing tests of a pytest -q run, else its last line."""
    lines = output.strip().splitlines()
    failed = [line.removeprefix("FAILED ") for line in lines if line.startswith("FAILED")]
    if failed:
        return "; ".join(failed)
    return lines[-1] if lines else "no output"


async def verify(ctx: ActionContext) -> ActionResult:
    """Run the task's test with pytest: `pass`, or `fail` with what failed."""
    check = await _run(ctx, *_PYTEST, "test_calc.py")
    if check.get("exit") == 0:
        return ActionResult(trigger="pass", output={"pytest": check["stdout"][-300:]})
    # No test output at all (pytest could not start): what it wrote to stderr says why.
    shown = check.get("stdout") or check.get("stderr") or check.get("message") or ""
    message = _failures(str(shown))
    return ActionResult(trigger="fail", payload={"message": message, "exit": check.get("exit")})


async def _verify_everything(ctx: ActionContext) -> ActionResult:
    suite = await _run(ctx, *_PYTEST)
    diff = await _run(ctx, "git", "diff", "--stat")
    if suite.get("exit") != 0 or "calc.py" not in str(diff.get("stdout")):
        return ActionResult(
            trigger="fail", payload={"reason": "the suite fails or nothing changed"}
        )
    return ActionResult(trigger="advance", output={"diff": diff["stdout"]})


verification = phase_action(_verify_everything)
"""The verification phase: the whole suite passes and only calc.py changed."""


async def _commit(ctx: ActionContext) -> ActionResult:
    await _run(ctx, "git", "add", "calc.py")
    await _run(ctx, "git", *GIT_IDENTITY, "commit", "-q", "-m", "calc: implement total")
    head = await _run(ctx, "git", "rev-parse", "--short", "HEAD")
    return ActionResult(trigger="done", data={"commit": str(head["stdout"]).strip()})


delivery = phase_action(_commit)
"""The delivery phase: commit the change."""


async def deliver(ctx: ActionContext) -> ActionResult:
    """Summarise what was delivered."""
    attempts = ctx.data.get("attempts", [])
    summary = (
        f"calc.total implemented in commit {ctx.data.get('commit')} of {ctx.data['repo']} "
        f"after {len(attempts)} attempt(s): {', '.join(attempts)}"
    )
    return ActionResult(trigger="ok", data={"summary": summary})
