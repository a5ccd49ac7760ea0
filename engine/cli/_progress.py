"""Show a run's progress: a live table on a terminal, plain lines when piped."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any, Self

from rich.console import Console
from rich.live import Live
from rich.table import Table

from phasegraph.events import Event, EventBus

__all__ = ["Progress", "progress_for"]

_NODE_LINES = {
    "node_started": "started in {state}",
    "node_completed": "completed ({outcome})",
    "node_failed": "FAILED: {reason}",
    "node_skipped": "{error}",
    "node_cancelled": "cancelled",
}


def _line(event: Event) -> str | None:
    template = _NODE_LINES.get(event.kind)
    if template is not None:
        fields: dict[str, Any] = {"state": "", "outcome": "", "error": "", **event.fields}
        fields["reason"] = fields["error"] or f"ended with outcome {fields['outcome']}"
        return f"[{event.seq:>4}] {event.node}: {template.format(**fields)}"
    if event.kind in {"transition", "run_completed", "run_failed", "run_waiting", "run_parked"}:
        return None
    detail = event.fields.get("message", "")
    return f"[{event.seq:>4}] {event.node or '-'}: {event.kind} {detail}".rstrip()


class Progress:
    """Base: subscribes to the bus for the duration of a ``with`` block."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._unsubscribe: Callable[[], None] | None = None

    def __enter__(self) -> Self:
        self._unsubscribe = self._bus.subscribe(self.on_event)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.close()

    def on_event(self, event: Event) -> None:
        """Handle one event."""

    def close(self) -> None:
        """Finish the display."""


class _Plain(Progress):
    """One line per node-level event: stable, greppable, safe in logs and pipes."""

    def __init__(self, bus: EventBus, stream: IO[str]) -> None:
        super().__init__(bus)
        self._stream = stream

    def on_event(self, event: Event) -> None:
        line = _line(event)
        if line is not None:
            print(line, file=self._stream, flush=True)


class _Live(Progress):
    """A live table of nodes (state, steps) refreshed a few times a second."""

    def __init__(self, bus: EventBus, console: Console) -> None:
        super().__init__(bus)
        self._console = console
        self._nodes: dict[str, list[str]] = {}
        self._seq = 0
        self._live = Live(self, console=console, refresh_per_second=8, transient=True)
        self._live.start()

    def __rich__(self) -> Table:
        table = Table(title=f"step {self._seq}", title_justify="left", box=None)
        for column in ("node", "status", "state", "steps"):
            table.add_column(column)
        for node, (status, state, steps) in self._nodes.items():
            table.add_row(node, status, state, steps)
        return table

    def on_event(self, event: Event) -> None:
        self._seq = event.seq
        if event.node is not None:
            status, state, steps = self._nodes.get(event.node, ["running", "", "0"])
            if event.kind == "transition":
                state, steps = str(event.fields.get("dest", "")), str(int(steps) + 1)
            elif event.kind == "node_started":
                state = str(event.fields.get("state", ""))
            elif event.kind.startswith("node_"):
                status = event.kind.removeprefix("node_")
            self._nodes[event.node] = [status, state, steps]
        line = _line(event)
        if line is not None:
            self._console.print(line, highlight=False, markup=False)

    def close(self) -> None:
        self._live.stop()


def progress_for(bus: EventBus, *, quiet: bool, stream: IO[str] | None = None) -> Progress:
    """A live display on a terminal, plain lines when piped, nothing when quiet."""
    stream = stream or sys.stderr
    if quiet:
        return Progress(bus)
    if stream.isatty():
        return _Live(bus, Console(file=stream))
    return _Plain(bus, stream)
