"""phasegraph: explicit state-machine workflows with a durable snapshot after every step.

Typical use::

    from phasegraph import Engine, open_store

    async with open_store("sqlite:///.phasegraph/runs.db") as store:
        state = await Engine(store).run("hello", {"who": "world"})

Importing the package loads none of its submodules: each public name is imported from
the module that defines it on first access (PEP 562), so ``phasegraph --version`` and
light entry points such as :mod:`phasegraph.errors` do not pay for the engine's
third-party libraries.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phasegraph.actions import ActionContext, ActionResult
    from phasegraph.api import Engine, StreamSettings
    from phasegraph.errors import (
        ErrorCode,
        IllegalTriggerError,
        PhasegraphError,
        RunNotFoundError,
        SpecError,
        StoreError,
    )
    from phasegraph.events import Event, EventBus, EventId
    from phasegraph.model import (
        NodeOutcome,
        NodeStatus,
        RunState,
        RunStatus,
        StepRecord,
        replace,
    )
    from phasegraph.run import RunOptions
    from phasegraph.spec import load_graph, load_machine
    from phasegraph.store import Store, open_store

__version__ = "0.1.0"
"""The distribution's version; ``tests/test_package.py`` keeps it equal to pyproject's."""

__all__ = [
    "ActionContext",
    "ActionResult",
    "Engine",
    "ErrorCode",
    "Event",
    "EventBus",
    "EventId",
    "IllegalTriggerError",
    "NodeOutcome",
    "NodeStatus",
    "PhasegraphError",
    "RunNotFoundError",
    "RunOptions",
    "RunState",
    "RunStatus",
    "SpecError",
    "StepRecord",
    "Store",
    "StoreError",
    "StreamSettings",
    "__version__",
    "load_graph",
    "load_machine",
    "open_store",
    "replace",
]

_SOURCES = {
    "ActionContext": "phasegraph.actions",
    "ActionResult": "phasegraph.actions",
    "Engine": "phasegraph.api",
    "StreamSettings": "phasegraph.api",
    "ErrorCode": "phasegraph.errors",
    "IllegalTriggerError": "phasegraph.errors",
    "PhasegraphError": "phasegraph.errors",
    "RunNotFoundError": "phasegraph.errors",
    "SpecError": "phasegraph.errors",
    "StoreError": "phasegraph.errors",
    "Event": "phasegraph.events",
    "EventBus": "phasegraph.events",
    "EventId": "phasegraph.events",
    "NodeOutcome": "phasegraph.model",
    "NodeStatus": "phasegraph.model",
    "RunState": "phasegraph.model",
    "RunStatus": "phasegraph.model",
    "StepRecord": "phasegraph.model",
    "replace": "phasegraph.model",
    "RunOptions": "phasegraph.run",
    "load_graph": "phasegraph.spec",
    "load_machine": "phasegraph.spec",
    "Store": "phasegraph.store",
    "open_store": "phasegraph.store",
}
"""The module each lazily exported name is imported from (the ``TYPE_CHECKING`` block above)."""


def __getattr__(name: str) -> Any:
    """Import a public name from its defining module on first access, then keep it."""
    source = _SOURCES.get(name)
    if source is None:
        # Also how ``from phasegraph import codec`` falls through to the submodule import.
        raise AttributeError(f"module 'phasegraph' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # later accesses are plain attribute reads
    return value


def __dir__() -> list[str]:
    """The module's attributes, including public names not imported yet."""
    return sorted({*globals(), *__all__})
