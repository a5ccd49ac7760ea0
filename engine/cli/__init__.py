"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

Importing this package and building the parser load none of the engine: each command's
module is imported only when that command runs (see :mod:`phasegraph.cli._commands`). May
import :mod:`phasegraph.api`, :mod:`phasegraph.analysis` and everything below them.

Process-level settings live here, with the applications, never in the library:
:func:`tune_collector` is what ``serve`` and
``worker`` call at start-up, and an embedding application's opt-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phasegraph.cli._main import main

if TYPE_CHECKING:
    from phasegraph.cli._collector import tune_collector

__all__ = ["main", "tune_collector"]


def __getattr__(name: str) -> Any:
    """``tune_collector``, imported on first use: ``phasegraph --version`` needs none of it."""
    if name != "tune_collector":
        raise AttributeError(f"module 'phasegraph.cli' has no attribute {name!r}")
    from phasegraph.cli._collector import tune_collector

    globals()[name] = tune_collector  # later accesses are plain attribute reads
    return tune_collector
