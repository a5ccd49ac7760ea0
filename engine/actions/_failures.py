"""How action failures are described: the ``error`` trigger and its classified payload."""

from __future__ import annotations

from typing import Any

from phasegraph.errors import ActionError, LoopDetectedError

__all__ = ["ERROR_LOG_EVENT", "ERROR_TRIGGER", "classify_error"]

ERROR_TRIGGER = "error"
"""Fired with a classified payload when an action raises in a state that accepts it."""

ERROR_LOG_EVENT = "error_log"
"""An event an action emits to add a record to the run's error log: fields ``message``,
optional ``severity`` (``error``, ``warning``, ``critical``), ``recovered`` and ``details``."""


def classify_error(error: BaseException) -> dict[str, Any]:
    """Describe an action failure as the payload of the ``error`` trigger.

    Timeouts are ``timeout``, action/provider failures ``llm_failure`` (both retryable);
    anything else is ``internal_error`` and not retryable. Callers never pass
    cancellation: it cancels the run, or propagates, instead of being classified.
    """
    if isinstance(error, TimeoutError):
        code, retryable = "timeout", True
    elif isinstance(error, LoopDetectedError):
        code, retryable = "loop_detected", True
    elif isinstance(error, ActionError | OSError):
        code, retryable = "llm_failure", True
    else:
        code, retryable = "internal_error", False
    message = str(error) or type(error).__name__
    return {
        "error_code": code,
        "error_type": type(error).__name__,
        "message": message,
        "retryable": retryable,
    }
