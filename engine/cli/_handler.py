"""What a command module hands the table of commands: its handlers by command name.

Its own module so that the command modules and :mod:`phasegraph.cli._commands` (which
imports each of them when one of its commands runs) both name these types without the
command modules importing the table back.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

__all__ = ["Handler", "Handlers"]

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
"""An async command handler returning the exit status."""

Handlers = Mapping[str, Handler]
"""A command module's handlers by command name (its ``HANDLERS``)."""
