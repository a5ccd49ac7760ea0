"""The ``phasegraph`` command line: parse, call the engine, render, exit with a status.

Importing this package and building the parser load none of the engine: each command's
module is imported only when that command runs (see :mod:`phasegraph.cli._commands`). May
import :mod:`phasegraph.api`, :mod:`phasegraph.analysis` and everything below them.
"""

from __future__ import annotations

from phasegraph.cli._main import main

__all__ = [
    "main",
]
