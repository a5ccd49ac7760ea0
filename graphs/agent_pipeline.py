"""Actions of the ``agent_pipeline`` example graph: nine scripted agents.

Each agent is a deterministic stand-in for a model or a tool run: it returns a fixed
answer built from the run's data, so the example runs offline in well under a second.
The run input decides which agent answers badly: ``flaky`` (default ``analyzer``) gives a
truncated JSON answer (or a failed tool run) on its first attempt only, ``broken`` on
every attempt. :func:`run_agent` validates the answer; an invalid one is logged and
reported as ``fail``, which the node's fallback chain recovers or turns into an emergency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns.errorlog import log_error
from phasegraph.concerns.validation import validate_output

__all__ = ["SCRIPTS", "run_agent"]

Script = Callable[[Mapping[str, Any]], Any]


def _installer(data: Mapping[str, Any]) -> Any:
    return {"returncode": 0, "stdout": "created .venv; installed 14 packages", "stderr": ""}


def _env_doctor(data: Mapping[str, Any]) -> Any:
    return {"summary": "Python 3.11 environment is consistent", "findings": []}


def _analyzer(data: Mapping[str, Any]) -> Any:
    return {
        "summary": "a CLI with a storage layer and a request router",
        "patterns": ["repository", "command dispatch"],
    }


def _dep_auditor(data: Mapping[str, Any]) -> Any:
    return {"summary": "2 unused dependencies", "remove": ["six", "simplejson"]}


def _bug_triage(data: Mapping[str, Any]) -> Any:
    return {"summary": "1 reproducible bug", "bugs": ["router drops a trailing slash"]}


def _fixer(data: Mapping[str, Any]) -> Any:
    bugs = data.get("bug_triage", {}).get("bugs", [])
    return {"summary": f"{len(bugs)} patch(es)", "patches": [f"fix: {bug}" for bug in bugs]}


def _test_runner(data: Mapping[str, Any]) -> Any:
    return {"returncode": 0, "stdout": "42 passed in 1.20s", "stderr": ""}


def _web_doctor(data: Mapping[str, Any]) -> Any:
    return "The web app configuration is sound: static files and CORS are set up."


def _pr_preparer(data: Mapping[str, Any]) -> Any:
    patches = data.get("fixer", {}).get("patches", [])
    return {"title": "Fix the router", "body": "\n".join(patches) or "No changes."}


SCRIPTS: Mapping[str, Script] = {
    "installer": _installer,
    "env_doctor": _env_doctor,
    "analyzer": _analyzer,
    "dep_auditor": _dep_auditor,
    "bug_triage": _bug_triage,
    "fixer": _fixer,
    "test_runner": _test_runner,
    "web_doctor": _web_doctor,
    "pr_preparer": _pr_preparer,
}
"""Node id → the scripted agent answering for it."""

_BAD = {
    "llm": '{"summary": "analysis of the code',  # truncated JSON, as a cut-off answer
    "tooling": {"returncode": 1, "stdout": "", "stderr": "error: resolver timed out"},
}


async def run_agent(ctx: ActionContext) -> ActionResult:
    """Run the node's scripted agent and validate its answer: ``ok`` or ``fail``.

    On ``ok`` the answer is stored under the node's id. On ``fail`` a record goes to the
    error log and the payload carries ``message`` and ``issues`` for the recovery.
    """
    agent = str(ctx.settings.get("agent", ctx.node_id))
    kind = str(ctx.settings.get("kind", "llm"))
    retrying = "reflection" in ctx.payload
    bad = ctx.input.get("broken") == ctx.node_id or (
        ctx.input.get("flaky", "analyzer") == ctx.node_id and not retrying
    )
    answer = _BAD[kind] if bad else SCRIPTS[ctx.node_id](ctx.data)
    verdict = validate_output(agent, answer, kind=kind, required=ctx.settings.get("required", ()))
    if verdict.ok:
        return ActionResult(trigger="ok", data={ctx.node_id: answer})
    issues = list(verdict.issues)
    message = f"{agent} output validation failed: {'; '.join(issues)}"
    log_error(
        ctx,
        message,
        details={"agent": agent, "provider": ctx.settings.get("provider"), "issues": issues},
    )
    return ActionResult(trigger="fail", payload={"message": message, "issues": issues})
