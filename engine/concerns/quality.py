"""Actions for the ``quality_loop`` machine: ``reflect``.

``verify`` reports ``fail`` with a payload describing what failed (``message``, and
whatever else helps, e.g. ``output``); :func:`reflect` turns it into a reflection the
next ``execute`` sees as ``ctx.payload`` and logs the failed verification.
"""

from __future__ import annotations

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns.errorlog import log_error, spent

__all__ = [
    "reflect",
]


async def reflect(ctx: ActionContext) -> ActionResult:
    """Reflect on the failed verification in ``ctx.payload``; trigger ``retry``.

    The next ``execute`` sees ``{reflection, attempt, failure}`` as its ``ctx.payload``
    (``attempt`` counts reflections so far). A warning record ``verification failed:
    MESSAGE (reflection N of M)`` goes to the error log.
    """
    failure = dict(ctx.payload)
    attempt, limit = spent(ctx, "reflect")
    message = str(failure.get("message") or "verification failed without a message")
    of = f" of {limit}" if limit is not None else ""
    reflection = (
        f"Verification failed: {message}. Find the cause before changing anything else, "
        "and change the approach rather than repeating it."
    )
    log_error(
        ctx,
        f"verification failed: {message} (reflection {attempt}{of})",
        severity="warning",
        details={"failure": failure, "reflection": attempt},
    )
    return ActionResult(
        trigger="retry",
        payload={"reflection": reflection, "attempt": attempt, "failure": failure},
    )
