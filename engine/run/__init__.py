"""Driving runs: prepare, step, interpret, read, fork and replay.

A graph is prepared once; each step is decided and built by pure functions; the
interpreter loop commits them; a run can be read at any seq, forked and replayed.

May import :mod:`phasegraph.concerns`, :mod:`phasegraph.tools`, :mod:`phasegraph.actions`,
:mod:`phasegraph.spec`, :mod:`phasegraph.store` and everything below them.
"""

from __future__ import annotations

from phasegraph.run._fork import create_run, fork_state
from phasegraph.run._interpreter import (
    Run,
)
from phasegraph.run._options import (
    RUN_ID_PATTERN,
    Clock,
    IdFactory,
    RunOptions,
    SystemClock,
    TimeOrderedIds,
    check_run_id,
)
from phasegraph.run._prepare import REDUCERS, PreparedGraph, initial_state, prepare
from phasegraph.run._replay import (
    Divergence,
    ReplayReport,
    differing_fields,
    replay_history,
    report_view,
)
from phasegraph.run._stored import (
    Loaded,
    decode_history,
    decode_stored,
    first_commit,
    load,
    rebuild,
    run_meta,
)

__all__ = [
    "REDUCERS",
    "RUN_ID_PATTERN",
    "Clock",
    "Divergence",
    "IdFactory",
    "Loaded",
    "PreparedGraph",
    "ReplayReport",
    "Run",
    "RunOptions",
    "SystemClock",
    "TimeOrderedIds",
    "check_run_id",
    "create_run",
    "decode_history",
    "decode_stored",
    "differing_fields",
    "first_commit",
    "fork_state",
    "initial_state",
    "load",
    "prepare",
    "rebuild",
    "replay_history",
    "report_view",
    "run_meta",
]
