"""Actions for the ``fallback_chain`` machine: ``recover`` and ``emergency``.

The main work fails by returning ``fail`` (its payload may carry ``message``) or by
raising; a raised error arrives as the payload of the ``error`` trigger,
``{error_code, error_type, message, retryable}``. :func:`recover` turns that failure into
a reflection for the retry; :func:`emergency` turns it into an :class:`EmergencyError` by
fixed rules (no model is asked), stores it in the run's data and ends the node failed.
Both add a record to the run's error log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.actions._base import writes_data
from phasegraph.concerns.errorlog import log_error, spent
from phasegraph.errors import ActionError, ActionTimeoutError, LoopDetectedError, RunError
from phasegraph.model import PATH_SEPARATOR

__all__ = [
    "emergency",
    "recover",
]

DATA_KEY = "error"
"""Default data key of the structured error (a node's ``with: {error_key: ...}`` changes it;
the ``recovery`` and ``emergency`` blocks of ``with`` hold only their ``enabled`` switch)."""

_RERAISE_STATE = "reraise"
_SOFT_FAILURE = "action_failed"  # a reported failure, unless its payload says more


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """How the emergency presents one error code.

    Attributes:
        message: What went wrong, for people.
        suggestions: What the user can do about it.
        retryable: Whether trying again later may succeed.
    """

    message: str
    suggestions: tuple[str, ...]
    retryable: bool


RULES: Mapping[str, Rule] = MappingProxyType(
    {
        "timeout": Rule(
            message="The task ran out of time.",
            suggestions=("Try again later.", "Narrow the task down."),
            retryable=True,
        ),
        "loop_detected": Rule(
            message="The agent kept repeating the same call.",
            suggestions=("Split the task into smaller steps.", "Check the tool arguments."),
            retryable=True,
        ),
        "llm_failure": Rule(
            message="The model provider failed.",
            suggestions=("Try again later.", "Switch to another model."),
            retryable=True,
        ),
        "action_failed": Rule(
            message="The main work failed.",
            suggestions=(
                "Read the original error: it names the cause.",
                "Fix what it names, then run again.",
            ),
            retryable=True,
        ),
        "internal_error": Rule(
            message="An internal error stopped the task.",
            suggestions=("Report the error with the run id to the maintainers.",),
            retryable=False,
        ),
    }
)
"""Error code → rule. A node may replace suggestions with ``with: {suggestions: {CODE: [...]}}``."""

ACTION_SUGGESTIONS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "shell": (
            "Read the command's exit status and stderr in the original error.",
            "Run the command by hand in the same directory to reproduce it.",
        ),
        "python": (
            "Read the exception and the line it was raised at in the original error.",
            "Fix the function, then run again.",
        ),
        "http": (
            "Read the status and the response in the original error.",
            "Check the URL and that the service is up.",
        ),
    }
)
"""Suggestions for ``action_failed`` by the failing action's kind (its payload's ``action``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmergencyError:
    """The structured error a fallback chain ends with.

    Attributes:
        error_code: ``timeout``, ``loop_detected``, ``llm_failure`` (the model provider),
            ``action_failed`` (an action reported or raised a failure of its own) or
            ``internal_error`` (an unexpected exception).
        message: What went wrong, for people.
        suggestions: What the user can do about it.
        retryable: Whether trying again later may succeed.
        original_error: The message of the failure that started it.
    """

    error_code: str
    message: str
    suggestions: tuple[str, ...]
    retryable: bool
    original_error: str

    def to_dict(self) -> dict[str, Any]:
        """The five fields as JSON-like values."""
        return {
            "error_code": self.error_code,
            "message": self.message,
            "suggestions": list(self.suggestions),
            "retryable": self.retryable,
            "original_error": self.original_error,
        }

    def to_message(self) -> str:
        """One readable paragraph: ``message (original). Suggestions: 1) ... 2) ...``."""
        hints = " ".join(f"{n}) {text}" for n, text in enumerate(self.suggestions, 1))
        text = f"{self.message} ({self.original_error})"
        return f"{text} Suggestions: {hints}" if hints else text


def structured_error(
    failure: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> EmergencyError:
    """Build the structured error for a failure payload by the rules in :data:`RULES`.

    Args:
        failure: The ``error`` trigger's payload, or a reported failure's payload (no
            ``error_code``: treated as ``action_failed``).
        settings: The node's ``with``; ``suggestions.CODE`` overrides a rule's suggestions.
    """
    code = str(failure.get("error_code") or _SOFT_FAILURE)
    if code not in RULES:
        code = "internal_error"
    rule = RULES[code]
    overrides = dict((settings or {}).get("suggestions") or {})
    default = rule.suggestions
    if code == "action_failed":
        default = ACTION_SUGGESTIONS.get(str(failure.get("action")), default)
    suggestions = tuple(str(s) for s in overrides.get(code, default))
    return EmergencyError(
        error_code=code,
        message=rule.message,
        suggestions=suggestions,
        retryable=rule.retryable,
        original_error=_describe(failure),
    )


def reraised(failure: Mapping[str, Any]) -> Exception:
    """An exception that the ``error`` trigger classifies as ``failure`` was classified.

    The original exception object is not part of the snapshot, so it is rebuilt from its
    code and message: ``timeout`` → :class:`ActionTimeoutError`, ``loop_detected`` →
    :class:`LoopDetectedError`, ``llm_failure`` and ``action_failed`` →
    :class:`ActionError`, anything else → :class:`RunError` (``internal_error``).
    """
    message = _describe(failure)
    code = failure.get("error_code") or _SOFT_FAILURE
    if code == "timeout":  # a phasegraph error: its message is shown as it is
        return ActionTimeoutError(message)
    if code == "loop_detected":
        return LoopDetectedError(message)
    if code in ("llm_failure", "action_failed"):
        return _ReraisedActionError(message, failure_code=str(code))
    return RunError(message)


async def recover(ctx: ActionContext) -> ActionResult:
    """Reflect on the failure in ``ctx.payload`` and ask for a retry (trigger ``retry``).

    The retry sees ``{reflection, attempt, failure}`` as its ``ctx.payload``. A warning
    record ``retry N of M after CODE: MESSAGE`` goes to the error log.
    """
    failure = dict(ctx.payload)
    attempt, limit = spent(ctx, "retries")
    code = str(failure.get("error_code") or _SOFT_FAILURE)
    of = f" of {limit}" if limit is not None else ""
    reflection = (
        f"Attempt {attempt} failed with {code}: {_describe(failure)}. "
        "Do not repeat the same steps; address this cause first."
    )
    log_error(
        ctx,
        f"retry {attempt}{of} after {code}: {_describe(failure)}",
        severity="warning",
        details={"failure": failure, "retry": attempt},
    )
    payload = {"reflection": reflection, "attempt": attempt, "failure": failure}
    return ActionResult(trigger="retry", payload=payload)


def error_key(settings: Mapping[str, Any]) -> tuple[str]:
    """The data key the emergency writes: ``with.error_key``, else :data:`DATA_KEY`.

    Declared with :func:`~phasegraph.actions._base.writes_data`, so a node whose
    ``writes:`` leaves it out may still record its structured error.
    """
    return (str(settings.get("error_key", DATA_KEY)),)


@writes_data(error_key)
async def emergency(ctx: ActionContext) -> ActionResult:
    """End the chain: the structured error into data and the error log, trigger ``fail``.

    Bound to the ``emergency`` hook, which the ``reraise`` state shares: there (the
    node's ``emergency.enabled`` is false) it raises :func:`reraised` instead, so the
    node fails with the original error.

    Raises:
        Exception: The rebuilt original error, in the ``reraise`` state.
    """
    failure = dict(ctx.payload)
    if ctx.state.rpartition(PATH_SEPARATOR)[2] == _RERAISE_STATE:
        raise reraised(failure)
    error = structured_error(failure, ctx.settings)
    details = error.to_dict()
    log_error(ctx, error.to_message(), severity="critical", details=details)
    (key,) = error_key(ctx.settings)
    return ActionResult(trigger="fail", data={key: details}, payload=details)


class _ReraisedActionError(ActionError):
    """A rebuilt action failure that keeps its code (``llm_failure`` or ``action_failed``)."""

    def __init__(self, message: str, *, failure_code: str) -> None:
        super().__init__(message)
        self.failure_code = failure_code


def _describe(failure: Mapping[str, Any]) -> str:
    message = failure.get("message") or failure.get("original_error")
    if message:
        return str(message)
    return "the main work returned 'fail' without a message (add 'message' to its payload)"
