"""Keep compiled graphs out of the cyclic garbage collector's way once runs pile up.

A compiled graph (its machines, routes, bound actions, and the modules they import)
lives as long as the process and is never garbage, yet every full collection walks all
of it again. With many runs in flight full collections come often — a run's objects
survive the young collections while it waits on its store — and walking tens of
thousands of long-lived objects each time cost as much as the runs' own work (about a
sixth of the time of 1,000 concurrent runs on Redis, ``benchmarks/targets.py``).

So once :data:`FREEZE_AT` runs are in flight in the process and a graph was compiled
since the last time, what is alive is moved out of the collector's reach with
``gc.freeze()`` after a full collection. Earlier freezes by this module are undone
first (``gc.unfreeze()``), so whatever died since — a graph an engine replaced in its
cache — is collected then rather than kept for good. Runs started later are not frozen:
their objects are collected as usual.

Nothing is done while the collector is disabled, or when something else froze objects
first (``phasegraph serve`` and workers tune the collector themselves at start-up): the
application manages the collector then.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["FREEZE_AT", "compiled", "run_entered", "run_left"]

FREEZE_AT: Final = 8
"""Runs in flight at once from which compiled graphs are frozen (a busy, long-lived process)."""


class _Collector:
    __slots__ = ("ours", "pending", "runs")

    def __init__(self) -> None:
        self.runs = 0  # runs in flight in this process
        self.pending = False  # a graph was compiled since the last freeze
        self.ours = False  # the frozen objects were frozen here


_STATE: Final = _Collector()


def compiled() -> None:
    """A graph was compiled: freeze it once enough runs are in flight."""
    _STATE.pending = True


def run_entered() -> None:
    """A run started being driven in this process."""
    state = _STATE
    state.runs += 1
    if state.pending and state.runs >= FREEZE_AT:
        _freeze(state)


def run_left() -> None:
    """A run counted by :func:`run_entered` stopped being driven."""
    _STATE.runs -= 1


def _freeze(state: _Collector) -> None:
    """Freeze what is alive, unless the application manages the collector (then later)."""
    if not gc.isenabled() or (gc.get_freeze_count() and not state.ours):
        return  # still pending: asked again when the next run enters
    state.pending = False
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    state.ours = True
