"""phasegraph: explicit state-machine workflows with a durable snapshot after every step.

Typical use::

    from phasegraph import Engine, open_store

    async with open_store("sqlite:///.phasegraph/runs.db") as store:
        state = await Engine(store).run("hello", {"who": "world"})
"""

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.errors import (
    ErrorCode,
    IllegalTriggerError,
    PhasegraphError,
    RunNotFoundError,
    SpecError,
    StoreError,
)
from phasegraph.events import Event, EventBus
from phasegraph.model import NodeOutcome, NodeStatus, RunState, RunStatus, StepRecord
from phasegraph.run import RunOptions
from phasegraph.spec import load_graph, load_machine
from phasegraph.store import Store, open_store

__version__ = "0.1.0"

__all__ = [
    "ActionContext",
    "ActionResult",
    "Engine",
    "ErrorCode",
    "Event",
    "EventBus",
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
    "__version__",
    "load_graph",
    "load_machine",
    "open_store",
]
