"""Show a run's progress: a live table on a terminal, plain lines when piped.

Both start with one line naming the run (so a run can be found, and resumed, while it is
still going). The table lists every node of the graph in DAG order, pending ones too,
with the nodes done out of all and the time elapsed; it starts from the run's state as
committed, so a resumed or answered run shows what it already did.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import IO, Any, Self

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from phasegraph.events import Event, EventBus
from phasegraph.model import NodeStatus, RunState

__all__ = ["Progress", "progress_for"]

_NODE_LINES = {
    "node_started": "started in {state}",
    "node_completed": "completed ({outcome})",
    "node_failed": "FAILED: {reason}",
    "node_skipped": "{error}",
    "node_cancelled": "cancelled",
}
_DONE = frozenset(
    str(s)
    for s in (NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED)
)


_SAID_CHARS = 60


def _line(event: Event) -> str | None:
    if event.live:
        return None  # streamed text: the live table shows it, logs never do
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

    def __init__(self, bus: EventBus, stream: IO[str], opening: str) -> None:
        super().__init__(bus)
        self._stream = stream
        if opening:
            print(opening, file=stream, flush=True)

    def on_event(self, event: Event) -> None:
        line = _line(event)
        if line is not None:
            print(line, file=self._stream, flush=True)


class _Board:
    """Every node's status, state and steps, in DAG order, kept from events."""

    def __init__(self, run_id: str, order: Sequence[str], state: RunState | None) -> None:
        self.run_id = run_id
        self.seq = state.seq if state else 0
        self.started = time.monotonic()
        self.nodes: dict[str, list[str]] = {node: ["pending", "", "0"] for node in order}
        self.said: dict[str, str] = {}  # the tail of what a model is typing, per node
        if state is not None:
            for node_id, node in state.nodes.items():
                self.nodes[node_id] = [str(node.status), node.state, str(node.steps)]

    def update(self, event: Event) -> None:
        if event.live:
            if event.node is not None and isinstance(event.fields.get("text"), str):
                said = self.said.get(event.node, "") + event.fields["text"]
                self.said[event.node] = said[-_SAID_CHARS:]
            return
        self.said.pop(event.node or "", None)
        self.run_id = event.run_id
        self.seq = event.seq
        if event.node is None:
            return
        status, state, steps = self.nodes.get(event.node, ["pending", "", "0"])
        if event.kind == "transition":
            state, steps = str(event.fields.get("dest", "")), str(int(steps) + 1)
        elif event.kind == "node_started":
            status, state = "running", str(event.fields.get("state", ""))
        elif event.kind.endswith("_request"):  # a human gate opened
            status = "waiting"
        elif event.kind.endswith("_reply"):
            status = "running"
        elif event.kind.startswith("node_"):
            status = event.kind.removeprefix("node_")
        self.nodes[event.node] = [status, state, steps]

    def title(self) -> str:
        done = sum(status in _DONE for status, _, _ in self.nodes.values())
        elapsed = time.monotonic() - self.started
        return (
            f"run {self.run_id} · step {self.seq} · {done}/{len(self.nodes)} nodes done · "
            f"{elapsed:.1f} s"
        )


class _Live(Progress):
    """A live table of every node (status, state, steps) refreshed a few times a second."""

    def __init__(self, bus: EventBus, console: Console, board: _Board, opening: str) -> None:
        super().__init__(bus)
        self._console = console
        self._board = board
        if opening:
            console.print(opening, highlight=False, markup=False, soft_wrap=True)
        self._live = Live(self, console=console, refresh_per_second=8, transient=True)
        self._live.start(refresh=True)  # the first frame at once: every node, before any step

    def __rich__(self) -> Group:
        table = Table(box=None)
        said = self._board.said
        for column in ("node", "status", "state", "steps", *(["model"] if said else [])):
            table.add_column(column)
        for node, (status, state, steps) in self._board.nodes.items():
            typing = [" ".join(said.get(node, "").split())] if said else []
            table.add_row(node, status, state, steps, *typing)
        # The summary above the table, not its title: a title wraps at the table's width.
        return Group(Text(self._board.title(), style="italic", no_wrap=True), table)

    def on_event(self, event: Event) -> None:
        self._board.update(event)
        line = _line(event)
        if line is not None:
            self._console.print(line, highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        self._live.stop()


def progress_for(
    bus: EventBus,
    *,
    quiet: bool,
    stream: IO[str] | None = None,
    run_id: str = "",
    order: Sequence[str] = (),
    state: RunState | None = None,
    opening: str = "",
) -> Progress:
    """A live display on a terminal, plain lines when piped, nothing when quiet.

    Args:
        bus: Where the run's events arrive.
        quiet: Show nothing.
        stream: Where to write (default stderr).
        run_id: The run shown.
        order: Every node of the graph, in DAG order.
        state: The run as committed before this command drives it (resume, reply).
        opening: The first line (which run, how to stop and resume it).
    """
    stream = stream or sys.stderr
    if quiet:
        return Progress(bus)
    if stream.isatty():
        return _Live(bus, Console(file=stream), _Board(run_id, order, state), opening)
    return _Plain(bus, stream, opening)
