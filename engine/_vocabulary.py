"""Values the command line offers before it imports any of the engine: their one home.

``phasegraph --help`` and ``--version`` must cost little more than a bare Python start
(``benchmarks/cli_startup.py``), so the parser cannot import :mod:`phasegraph.model`,
:mod:`phasegraph.store` or :mod:`phasegraph.analysis`, each of which loads far more
than these values. They live here, in a module that imports only the standard library's
cheapest parts, and those modules (and the parser) import them from here:

* :class:`RunStatus`, re-exported by :mod:`phasegraph.model` (``status --status``);
* :data:`DEFAULT_STORE_URL`, re-exported by :mod:`phasegraph.store` (``--store``);
* :data:`DIAGRAM_FORMATS`, re-exported by :mod:`phasegraph.analysis` as ``FORMATS``
  (``diagram --format``);
* :data:`CAPTURE_CONTENT_ENV`, read by the traces (``--otel-content``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final, Literal

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_STORE_URL",
    "DIAGRAM_FORMATS",
    "STREAM_RETENTION",
    "DiagramFormat",
    "RunStatus",
]

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The OpenTelemetry GenAI variable that puts messages and tool calls in traces
(``--otel-content``)."""

DEFAULT_STORE_URL: Final = "sqlite:///.phasegraph/runs.db"
"""The embedded default store, relative to the current directory."""

STREAM_RETENTION: Final = 2000
"""Live events (a model's streamed text) kept per run until their turn commits, by default."""

DiagramFormat = Literal["mermaid", "dot"]
"""A diagram's output format."""

DIAGRAM_FORMATS: tuple[DiagramFormat, ...] = ("mermaid", "dot")
"""Every diagram format; the first is the default."""


class RunStatus(StrEnum):
    """A run's lifecycle.

    running → waiting | parked | completed | failed | cancelled;
    waiting | parked → running | cancelled. completed, failed and cancelled are terminal.
    """

    RUNNING = "running"
    WAITING = "waiting"
    PARKED = "parked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the run can never change again."""
        return self in _TERMINAL_RUN

    def ensure_can_become(self, new: RunStatus, *, run_id: str | None = None) -> None:
        """Raise :class:`RunStateError` unless ``self → new`` is a legal change."""
        if new is not self and new not in _RUN_MOVES[self]:
            # Imported here: the errors module loads dataclasses, which the command
            # line's parser (the reason this module exists) must not pay for.
            from phasegraph.errors import RunStateError

            raise RunStateError(f"run cannot go from {self} to {new}", run_id=run_id)


_TERMINAL_RUN = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
_RUN_MOVES: Mapping[RunStatus, frozenset[RunStatus]] = {
    RunStatus.RUNNING: frozenset(RunStatus) - {RunStatus.RUNNING},
    RunStatus.WAITING: frozenset({RunStatus.RUNNING, RunStatus.PARKED, RunStatus.CANCELLED}),
    RunStatus.PARKED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}
