"""Companion actions of the ``team_phase`` machine: validation, rollback, checkpoint.

After a phase fails, ``validate`` runs the node's ``validation_command``; when it fails,
``rollback`` runs ``rollback_command``. Both are run exactly like a ``shell:`` action
(argv split with shlex, ``{name}`` templates filled from input and data after the split,
no shell, own process group killed on timeout), in ``command_cwd`` for at most
``command_timeout`` seconds (default :data:`~phasegraph.actions.DEFAULT_COMMAND_TIMEOUT`,
60). ``checkpoint`` records the phase under the data key ``checkpoints`` (a mapping by
node id; declare ``reducers: {checkpoints: merge}`` when phases may run at the same time).

A checkpoint is written in its own step, after the step that finished the phase's work:
a crash in between re-runs only the checkpoint on resume, never the phase, and a
checkpointed phase is never run again (committed steps are never redone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.actions._shell import DEFAULT_COMMAND_TIMEOUT, build_shell_action
from phasegraph.concerns.errorlog import log_error
from phasegraph.errors import ActionError
from phasegraph.model import PATH_SEPARATOR, ActionDef

__all__ = [
    "checkpoint",
    "rollback",
    "run_command",
    "validate",
]

CHECKPOINTS_KEY = "checkpoints"
"""The data key checkpoints are written to: ``{node_id: record}``."""


ROLLBACK_STARTED = "phase_rollback_started"
ROLLBACK_COMPLETED = "phase_rollback_completed"
ROLLBACK_FAILED = "phase_rollback_failed"

_FAILED_CHECKPOINT_STATE = "checkpointing_failed"
_STDERR_TAIL = 300  # how much of a failed command's stderr its reason quotes


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandOutcome:
    """What one configured command did.

    Attributes:
        passed: Exit status 0 within the timeout.
        summary: argv, exit status, output tails (or why it could not start).
    """

    passed: bool
    summary: Mapping[str, Any]


async def run_configured(ctx: ActionContext, key: str) -> CommandOutcome:
    """Run the command the node's ``with`` names under ``key``.

    Raises:
        ActionError: ``key`` is not set.
    """
    command = ctx.settings.get(key)
    if not command:
        raise ActionError(f"node {ctx.node_id!r} has no with.{key}", node_id=ctx.node_id)
    if isinstance(ctx.item, Mapping) and key in ctx.item:
        command = _literal(command)  # a plan's item is data: its braces are no template
    config: dict[str, Any] = {
        "shell": command,
        "timeout": float(ctx.settings.get("command_timeout", DEFAULT_COMMAND_TIMEOUT)),
        "on_exit": {"0": "passed", "default": "failed"},
    }
    if ctx.settings.get("command_cwd"):
        config["cwd"] = ctx.settings["command_cwd"]
    action = build_shell_action(ActionDef(kind="shell", config=config), None)
    try:
        result = await action(ctx)
    except ActionError as exc:  # cannot start, or a template names an unknown value
        return CommandOutcome(passed=False, summary={"command": command, "error": exc.message})
    return CommandOutcome(passed=result.trigger == "passed", summary=dict(result.output))


def _literal(command: Any) -> Any:
    """``command`` with every brace doubled, so that no ``{name}`` in it is filled."""

    def escaped(token: Any) -> Any:
        return token.replace("{", "{{").replace("}", "}}") if isinstance(token, str) else token

    if isinstance(command, list | tuple):
        return [escaped(token) for token in command]
    return escaped(command)


async def run_command(ctx: ActionContext) -> ActionResult:
    """Run the node's ``with.command`` (a plan phase's work): ``ok``, or ``fail`` with why.

    Run like the validation and rollback commands (no shell; ``command_cwd``,
    ``command_timeout``). ``fail`` carries the reason the failure path records.
    """
    outcome = await run_configured(ctx, "command")
    summary = {"command": outcome.summary}
    if outcome.passed:
        return ActionResult(trigger="ok", output=summary)
    exit_status = outcome.summary.get("exit")
    reason = str(outcome.summary.get("error") or f"the command exited with status {exit_status}")
    stderr = str(outcome.summary.get("stderr") or "").strip()
    if stderr:
        reason += f": {stderr[-_STDERR_TAIL:]}"
    return ActionResult(trigger="fail", payload={"reason": reason}, output=summary)


def _reason(ctx: ActionContext) -> str:
    """Why the phase failed, carried along in the payloads of the failure path."""
    payload = ctx.payload
    return str(payload.get("reason") or payload.get("message") or "the phase reported fail")


async def validate(ctx: ActionContext) -> ActionResult:
    """Run ``validation_command``; on failure announce the rollback that follows."""
    outcome = await run_configured(ctx, "validation_command")
    reason = _reason(ctx)
    if not outcome.passed and "reason" not in ctx.payload and "message" not in ctx.payload:
        status = outcome.summary.get("exit")
        reason = f"its validation failed (exit status {status})"  # the work itself succeeded
    if outcome.passed:
        return ActionResult(
            trigger="passed",
            payload={"reason": reason, "validation": "passed"},
            output={"validation": outcome.summary},
        )
    ctx.emit(
        ROLLBACK_STARTED,
        {
            "phase": ctx.node_id,
            "reason": reason,
            "rollback_command": ctx.settings.get("rollback_command"),
        },
    )
    return ActionResult(
        trigger="failed",
        payload={"reason": reason, "validation": "failed"},
        output={"validation": outcome.summary},
    )


async def rollback(ctx: ActionContext) -> ActionResult:
    """Run ``rollback_command``; report completion (checkpoint follows) or failure."""
    outcome = await run_configured(ctx, "rollback_command")
    reason = _reason(ctx)
    command = ctx.settings.get("rollback_command")
    if outcome.passed:
        ctx.emit(ROLLBACK_COMPLETED, {"phase": ctx.node_id, "rollback_command": command})
        log_error(
            ctx,
            f"phase failed ({reason}); rolled back with {command!r}",
            severity="warning",
            details={"rollback": outcome.summary},
        )
        payload = {"reason": reason, "validation": "failed", "rolled_back": True}
        return ActionResult(trigger="passed", payload=payload, output={"rollback": outcome.summary})
    ctx.emit(
        ROLLBACK_FAILED,
        {"phase": ctx.node_id, "rollback_command": command, "result": outcome.summary},
    )
    log_error(
        ctx,
        f"rollback {command!r} failed; no checkpoint written",
        severity="critical",
        details={"rollback": outcome.summary},
    )
    return ActionResult(trigger="failed", output={"rollback": outcome.summary})


async def checkpoint(ctx: ActionContext) -> ActionResult:
    """Record the phase under ``checkpoints[node_id]`` and finish it."""
    failed = ctx.state.rpartition(PATH_SEPARATOR)[2] == _FAILED_CHECKPOINT_STATE
    record: dict[str, Any] = {"phase": ctx.node_id, "status": "failed" if failed else "completed"}
    if failed:
        record["reason"] = _reason(ctx)
        record["rolled_back"] = bool(ctx.payload.get("rolled_back"))
        if "validation" in ctx.payload:
            record["validation"] = ctx.payload["validation"]
    # Written as the whole mapping, so ordered phases accumulate even without a reducer;
    # phases that may run together need `reducers: {checkpoints: merge}` (else a clear
    # data-conflict error).
    earlier = ctx.data.get(CHECKPOINTS_KEY)
    records = {**earlier} if isinstance(earlier, Mapping) else {}
    records[ctx.node_id] = record
    return ActionResult(trigger="saved", data={CHECKPOINTS_KEY: records})


def checkpointed(data: Mapping[str, Any], node_id: str) -> Mapping[str, Any] | None:
    """The checkpoint recorded for ``node_id`` in a run's data, if any."""
    records = data.get(CHECKPOINTS_KEY)
    if not isinstance(records, Mapping):
        return None
    found = records.get(node_id)
    return found if isinstance(found, Mapping) else None
