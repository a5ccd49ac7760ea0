"""How action failures are described: the ``error`` trigger and its classified payload."""

from __future__ import annotations

import functools
import os
import traceback
from pathlib import Path
from typing import Any

from phasegraph.errors import ActionError, LoopDetectedError, PhasegraphError

__all__ = [
    "ERROR_LOG_EVENT",
    "ERROR_TRIGGER",
    "ProviderError",
    "classify_error",
    "describe_error",
]


@functools.cache
def _not_the_users() -> tuple[str, ...]:
    """Trees of the engine's wrappers and of the standard library.

    "Where it was raised" names the frame of the user's own code, if there is one. Found
    at the first failure described: ``sysconfig`` takes a share of a short run's start-up.
    """
    import sysconfig

    return (
        str(Path(__file__).resolve().parents[1]) + os.sep,
        str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep,
    )


class ProviderError(ActionError):
    """The model provider refused or failed a request: raise it to say so.

    The ``error`` trigger classifies it as ``llm_failure`` (a fallback chain's emergency
    says "The model provider failed."), not ``action_failed``. The ``llm:`` action raises
    it; a ``python:`` action that calls a model itself raises it too
    (``from phasegraph.actions import ProviderError``), e.g.
    ``raise ProviderError("rate limited", status=429, retry_after=2.0)``.

    Attributes:
        status: The HTTP status, when the provider answered.
        retryable: Whether trying again later may help (429, 5xx, timeouts).
        retry_after: Seconds the provider asked to wait, when it said.
        context_length: The request was over the model's context window.
    """

    failure_code = "llm_failure"
    """How the ``error`` trigger classifies it (other action errors are ``action_failed``)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
        context_length: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.context_length = context_length


ERROR_TRIGGER = "error"
"""Fired with a classified payload when an action raises in a state that accepts it."""

ERROR_LOG_EVENT = "error_log"
"""An event an action emits to add a record to the run's error log: fields ``message``,
optional ``severity`` (``error``, ``warning``, ``critical``), ``recovered`` and ``details``."""


def classify_error(error: BaseException) -> dict[str, Any]:
    """Describe an action failure as the payload of the ``error`` trigger.

    Timeouts are ``timeout``; a model provider's failures ``llm_failure`` (an error whose
    ``failure_code`` says so); other action failures (:class:`ActionError`, ``OSError``)
    ``action_failed`` -- all retryable unless the error says it is not (a provider's
    ``4xx`` other than 429); anything else is ``internal_error`` and not retryable. The
    message is :func:`describe_error`'s: an unexpected exception's type, message and the
    line of the user's code that raised it. A provider's requested wait
    is kept as ``retry_after`` (seconds). Callers never pass cancellation: it cancels the
    run, or propagates, instead of being classified.
    """
    if isinstance(error, TimeoutError):
        code, retryable = "timeout", True
    elif isinstance(error, LoopDetectedError):
        code, retryable = "loop_detected", True
    elif isinstance(error, ActionError | OSError):
        code = str(getattr(error, "failure_code", "action_failed"))
        retryable = getattr(error, "retryable", True) is not False
    else:
        code, retryable = "internal_error", False
    message = describe_error(error)
    described = {
        "error_code": code,
        "error_type": type(error).__name__,
        "message": message,
        "retryable": retryable,
    }
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, int | float):
        described["retry_after"] = retry_after
    status = getattr(error, "status", None)
    if isinstance(status, int):
        described["status"] = status
    return described


def describe_error(error: BaseException) -> str:
    """What a person needs to act on a failure, in one line.

    A phasegraph error's own message; for anything else also its type and the line of
    code that raised it: ``KeyError: 'missing_key' (raised at tasks.py:12 in lookup)``.
    """
    message = str(error)
    if isinstance(error, PhasegraphError):
        return message or type(error).__name__
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    where = _raised_at(error)
    return f"{text} (raised at {where})" if where else text


def _raised_at(error: BaseException) -> str | None:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    users = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_not_the_users())]
    frame = (users or frames)[-1]
    path = Path(frame.filename)
    try:
        shown = str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return f"{shown}:{frame.lineno} in {frame.name}"
