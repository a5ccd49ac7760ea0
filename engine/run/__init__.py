"""Driving runs: prepare, step, interpret, read, fork and replay.

A graph is prepared once; each step is decided and built by pure functions; the
interpreter loop commits them; a run can be read at any seq, forked and replayed.

May import :mod:`phasegraph.concerns`, :mod:`phasegraph.tools`, :mod:`phasegraph.actions`,
:mod:`phasegraph.spec`, :mod:`phasegraph.store` and everything below them.

Reading a run (``load``, ``decode_history``, options) imports only what reading needs:
the interpreter, preparation and replay — and with them the machines, the graph library
and the action kinds — are imported on first use of one of their names (PEP 562), so a
read-only command such as ``phasegraph history`` does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from phasegraph.run._checkpoint import CheckpointPolicy, Checkpoints
from phasegraph.run._create import Created, create_run
from phasegraph.run._fork import fork_state
from phasegraph.run._lease import Hold, LeaseKeeper
from phasegraph.run._options import (
    RUN_ID_PATTERN,
    Clock,
    IdFactory,
    RunEnvironment,
    RunOptions,
    SystemClock,
    TimeOrderedIds,
    check_run_id,
)
from phasegraph.run._stored import (
    Loaded,
    decode_history,
    decode_stored,
    first_commit,
    history_json,
    load,
    rebuild,
    run_meta,
)

if TYPE_CHECKING:
    from phasegraph.run._gates import gate_answers
    from phasegraph.run._interpreter import Run, check_reply
    from phasegraph.run._prepare import REDUCERS, PreparedGraph, initial_state, prepare
    from phasegraph.run._replay import (
        Divergence,
        ReplayReport,
        differing_fields,
        replay_history,
        report_view,
    )

_LAZY = {
    "gate_answers": "phasegraph.run._gates",
    "Run": "phasegraph.run._interpreter",
    "check_reply": "phasegraph.run._interpreter",
    "REDUCERS": "phasegraph.run._prepare",
    "PreparedGraph": "phasegraph.run._prepare",
    "initial_state": "phasegraph.run._prepare",
    "prepare": "phasegraph.run._prepare",
    "Divergence": "phasegraph.run._replay",
    "ReplayReport": "phasegraph.run._replay",
    "differing_fields": "phasegraph.run._replay",
    "replay_history": "phasegraph.run._replay",
    "report_view": "phasegraph.run._replay",
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
    "REDUCERS",
    "RUN_ID_PATTERN",
    "CheckpointPolicy",
    "Checkpoints",
    "Clock",
    "Created",
    "Divergence",
    "Hold",
    "IdFactory",
    "LeaseKeeper",
    "Loaded",
    "PreparedGraph",
    "ReplayReport",
    "Run",
    "RunEnvironment",
    "RunOptions",
    "SystemClock",
    "TimeOrderedIds",
    "check_reply",
    "check_run_id",
    "create_run",
    "decode_history",
    "decode_stored",
    "differing_fields",
    "first_commit",
    "fork_state",
    "gate_answers",
    "history_json",
    "initial_state",
    "load",
    "prepare",
    "rebuild",
    "replay_history",
    "report_view",
    "run_meta",
]
