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

Freezing is not enough once thousands of runs are in flight: each step's objects live
until the run's next step, after thousands of other steps, so they are promoted to the
oldest generation and die there, and full collections come every few hundred
milliseconds (45 % of the time of 10,000 concurrent runs on Redis). So while
:data:`BUSY_AT` runs or more are in flight, the young generation is collected every
50,000 allocations instead of 700 (:data:`BUSY_THRESHOLDS`, as ``phasegraph serve``
sets for good). The thresholds found are put back once no run is in flight.

Where the application manages the collector, it is left alone: nothing is frozen while
the collector is disabled or once something else froze objects first, and the thresholds
are not raised while it is disabled or when they differ from those found when phasegraph
was imported (``phasegraph serve`` and workers tune the collector themselves at start-up).
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["BUSY_AT", "BUSY_THRESHOLDS", "FREEZE_AT", "compiled", "run_entered", "run_left"]

FREEZE_AT: Final = 8
"""Runs in flight at once from which compiled graphs are frozen (a busy, long-lived process)."""


BUSY_AT: Final = 256
"""Runs in flight at once from which young collections are made rarer (see the module)."""

BUSY_THRESHOLDS: Final = (50_000, 20, 10)
"""The collector's thresholds while :data:`BUSY_AT` runs are in flight."""

# The thresholds found when phasegraph was imported: the ones the application has not changed.
_DEFAULT_THRESHOLDS: Final = gc.get_threshold()


class _Collector:
    __slots__ = ("ours", "pending", "raised", "runs")

    def __init__(self) -> None:
        self.runs = 0  # runs in flight in this process
        self.pending = False  # a graph was compiled since the last freeze
        self.ours = False  # the frozen objects were frozen here
        self.raised = False  # the thresholds are BUSY_THRESHOLDS, set here


_STATE: Final = _Collector()


def compiled() -> None:
    """A graph was compiled: freeze it once enough runs are in flight."""
    _STATE.pending = True


def run_entered() -> None:
    """A run started being driven in this process."""
    state = _STATE
    state.runs += 1
    if state.runs >= FREEZE_AT:
        if state.pending:
            _freeze(state)
        if state.runs >= BUSY_AT and not state.raised:
            _raise(state)


def run_left() -> None:
    """A run counted by :func:`run_entered` stopped being driven."""
    state = _STATE
    state.runs -= 1
    if state.raised and not state.runs:
        state.raised = False
        if gc.get_threshold() == BUSY_THRESHOLDS:  # else the application changed them since
            gc.set_threshold(*_DEFAULT_THRESHOLDS)


def _raise(state: _Collector) -> None:
    """Make young collections rarer, unless the application manages the collector."""
    if gc.isenabled() and gc.get_threshold() == _DEFAULT_THRESHOLDS:
        gc.set_threshold(*BUSY_THRESHOLDS)
        state.raised = True


def _freeze(state: _Collector) -> None:
    """Freeze what is alive, unless the application manages the collector (then later)."""
    if not gc.isenabled() or (gc.get_freeze_count() and not state.ours):
        return  # still pending: asked again when the next run enters
    state.pending = False
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    state.ours = True
