"""Tune the cyclic garbage collector for a process that drives many runs at once.

The library never touches the collector: the process does. ``phasegraph serve`` and
``phasegraph worker`` call :func:`tune_collector` at start-up; an application embedding
the engine may call it too (``phasegraph.tune_collector()``), once its own start-up is
done. This module imports nothing of phasegraph, and nothing of the library imports it.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["BUSY_THRESHOLDS", "tune_collector"]

BUSY_THRESHOLDS: Final = (50_000, 20, 10)
"""The collector's thresholds set by :func:`tune_collector` (the young generation first)."""


def tune_collector() -> None:
    """Keep the garbage collector out of the way of many runs in flight.

    Call it once the process has started (modules imported, graphs compiled): what is
    alive then is moved out of every later collection (``gc.freeze()`` after a full
    collection), and the young generation is collected every 50,000 allocations instead
    of 700 (:data:`BUSY_THRESHOLDS`), so a step's short-lived objects die before a
    collection promotes them. Compiled graphs and imported modules live as long as the
    process, yet every full collection walks all of them again; with thousands of runs in
    flight, full collections come every few hundred milliseconds and took about 40 % of
    the time of 10,000 concurrent runs on Redis (``benchmarks/targets.py``, case
    ``many_10000``, against ``many_10000_tuned``).

    The cost: objects frozen stay in memory even once garbage, and young garbage in
    reference cycles lives longer. A process that drives a few runs at a time gains
    nothing from it.

    Example::

        import phasegraph

        phasegraph.tune_collector()  # once, at start-up, before the runs pile up
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*BUSY_THRESHOLDS)
