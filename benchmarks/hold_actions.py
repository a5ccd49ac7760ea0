"""An action that holds its run in flight until the benchmark says go (``targets.py``)."""

from __future__ import annotations

import asyncio

from phasegraph.actions import ActionContext, ActionResult

_OK = ActionResult(trigger="ok")


class _Gate:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.go = asyncio.Event()


_gate = _Gate(0)


def reset(expected: int) -> None:
    """Expect ``expected`` actions to wait before :func:`all_waiting` returns."""
    global _gate
    _gate = _Gate(expected)


async def hold(ctx: ActionContext) -> ActionResult:
    """Wait until :func:`release`."""
    gate = _gate
    gate.waiting += 1
    if gate.waiting >= gate.expected:
        gate.all_waiting.set()
    await gate.go.wait()
    return _OK


async def all_waiting() -> None:
    """Return once the expected number of actions wait."""
    await _gate.all_waiting.wait()


def release() -> None:
    """Let every waiting action return."""
    _gate.go.set()
