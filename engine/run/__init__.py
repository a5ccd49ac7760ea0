"""Driving runs: prepare, step, interpret, read, fork and replay.

A graph is prepared once; each step is decided and built by pure functions; the
interpreter loop commits them; a run can be read at any seq, forked and replayed.

May import :mod:`phasegraph.concerns`, :mod:`phasegraph.tools`, :mod:`phasegraph.actions`,
:mod:`phasegraph.spec`, :mod:`phasegraph.store` and everything below them.

Importing this package loads only the run options: the interpreter, preparation, replay
and middleware — and with them the machines, the graph library and the action kinds —
are imported on first use of one of their names (PEP 562), so a read-only command such
as ``phasegraph history`` does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from phasegraph.run._options import (
    RUN_ID_PATTERN,
    Clock,
    IdFactory,
    RunOptions,
    SystemClock,
    TimeOrderedIds,
)

if TYPE_CHECKING:
    from phasegraph.run._interpreter import Run
    from phasegraph.run._middleware import Middleware, chain
    from phasegraph.run._migrate import Migration, Renames
    from phasegraph.run._prepare import PreparedGraph, prepare
    from phasegraph.run._replay import Divergence, ReplayReport

_LAZY = {
    "Run": "phasegraph.run._interpreter",
    "Middleware": "phasegraph.run._middleware",
    "chain": "phasegraph.run._middleware",
    "Migration": "phasegraph.run._migrate",
    "Renames": "phasegraph.run._migrate",
    "PreparedGraph": "phasegraph.run._prepare",
    "prepare": "phasegraph.run._prepare",
    "Divergence": "phasegraph.run._replay",
    "ReplayReport": "phasegraph.run._replay",
}
"""The module each lazily exported name is imported from (the ``TYPE_CHECKING`` block)."""


def __getattr__(name: str) -> Any:
    """Import a driving name from its defining module on first access, then keep it."""
    source = _LAZY.get(name)
    if source is None:
        raise AttributeError(f"module 'phasegraph.run' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # later accesses are plain attribute reads
    return value


def __dir__() -> list[str]:
    """The module's attributes, including public names not imported yet."""
    return sorted({*globals(), *__all__})


__all__ = [
    "RUN_ID_PATTERN",
    "Clock",
    "Divergence",
    "IdFactory",
    "Middleware",
    "Migration",
    "PreparedGraph",
    "Renames",
    "ReplayReport",
    "Run",
    "RunOptions",
    "SystemClock",
    "TimeOrderedIds",
    "chain",
    "prepare",
]
