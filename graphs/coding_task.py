"""Python actions of the ``coding_task`` example; the model's work is in the graph itself.

The model (an ``llm:`` action, offline a scripted model server answering from
``coding_task.responses.json``) does the planning, writing, reflecting and committing
through tools; these functions create the repository, write the spec the reviewer sees,
run pytest as the quality loop's verification and summarise the delivery. The first
draft of the script skips the first element (the pytest run fails), and the fix comes
after the model's reflection.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import ActionError
from phasegraph.graphs.example_repo import init_repo, run_in_repo

__all__ = ["create_repository", "deliver", "plan", "verify"]

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


async def deliver(ctx: ActionContext) -> ActionResult:
    """Summarise what was delivered: the commit and the model's turns."""
    head = await _run(ctx, "git", "rev-parse", "--short", "HEAD")
    subject = await _run(ctx, "git", "log", "-1", "--format=%s")
    commit = str(head.get("stdout", "")).strip()
    turns = sum(1 for m in ctx.data.get("conversation", []) if m.get("role") == "assistant")
    summary = (
        f"{str(subject.get('stdout', '')).strip()!r} committed as {commit} in "
        f"{ctx.data['repo']} after {turns} model turns"
    )
    return ActionResult(trigger="ok", data={"summary": summary, "commit": commit})
