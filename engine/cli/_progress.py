"""Show a run's progress: a live table on a terminal, plain lines when piped.

Both start with one line naming the run (so a run can be found, and resumed, while it is
still going). The table lists every node of the graph in DAG order, pending ones too,
with the nodes done out of all and the time elapsed; it starts from the run's state as
committed, so a resumed or answered run shows what it already did.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

from phasegraph.events import Event, EventBus
from phasegraph.model import PATH_SEPARATOR, NodeState, NodeStatus, RunState
from phasegraph.run._prepare import PreparedGraph

# rich draws the live table, on a terminal only: piped output (plain lines) and quiet
# runs never import it, and it is a good share of a short run's start-up.
if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table

__all__ = ["Progress", "budget_limits", "progress_for"]

_NODE_LINES = {
    "node_started": "started in {state}",
    "node_completed": "completed ({outcome})",
    "node_failed": "FAILED: {reason}",
    "node_skipped": "{error}",
    "node_cancelled": "cancelled",
}
_EFFECT_LINES = {
    "effect_intent": "about to run {what} (effect id {effect_id}): intent committed",
    "effect_result": "{what} done (effect id {effect_id}): result committed",
}
_DONE = frozenset(
    str(s)
    for s in (NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED)
)


_SAID_CHARS = 60
_TOKENS = "tokens"  # the counter an ``llm:`` action spends its usage on


_SHOWN_CHILDREN = 8  # children a plan's line names before it counts the rest


def _spend_line(event: Event) -> str | None:
    """The line of a run budget's event: a call reserved, a crashed one charged, a gate."""
    fields = event.fields
    if event.kind == "spend_reserved":
        return f"reserved {fields.get('tokens', 0)} tokens for a model call"
    if event.kind == "reservation_charged":
        charged = dict(fields.get("charged") or {})
        return (
            f"charged a crashed model call's reservation ({charged.get('tokens', 0)} tokens): "
            "its answer was never committed"
        )
    if event.kind == "budget_request":
        return f"out of budget: waits at the run's budget gate (id {fields.get('id')})"
    if event.kind == "budget_waiting":
        return f"out of budget: waits at the budget gate already open (id {fields.get('id')})"
    return None


def _plan_line(event: Event) -> str | None:
    """The line of a plan's event: made (its version and children), refused or joined."""
    fields, called = event.fields, str(event.fields.get("called", "child"))
    if event.kind == "plan_expanded":
        made = [str(child).rsplit(".", 1)[-1] for child in fields.get("children", ())]
        names = ", ".join(made[:_SHOWN_CHILDREN])
        if len(made) > _SHOWN_CHILDREN:
            names += f" and {len(made) - _SHOWN_CHILDREN} more"
        limit = f", at most {fields['limit']} at a time" if fields.get("limit") else ""
        line = f"plan v{fields.get('version')}: {fields.get('members')} {called}s{limit}"
        return line + (f"; new: {names}" if names else "")
    if event.kind == "plan_refused":
        feedback = str(fields.get("feedback", "")).splitlines()
        more = f" (and {len(feedback) - 2} more problems)" if len(feedback) > 2 else ""
        return "plan refused: " + " ".join(feedback[:2]) + more
    if event.kind == "plan_joined":
        return f"every {called} of plan v{fields.get('version')} ended: {fields.get('trigger')}"
    return None


def _line(event: Event) -> str | None:
    if event.live:
        return None  # streamed text: the live table shows it, logs never do
    planned = _plan_line(event) if event.kind.startswith("plan_") else None
    if planned is not None:
        return f"[{event.seq:>4}] {event.node}: {planned}"
    template = _NODE_LINES.get(event.kind)
    if template is not None:
        fields: dict[str, Any] = {"state": "", "outcome": "", "error": "", **event.fields}
        fields["reason"] = fields["error"] or f"ended with outcome {fields['outcome']}"
        return f"[{event.seq:>4}] {event.node}: {template.format(**fields)}"
    spend = _spend_line(event)
    if spend is not None:
        return f"[{event.seq:>4}] {event.node}: {spend}"
    effect = _EFFECT_LINES.get(event.kind)
    if effect is not None:
        tool = event.fields.get("tool")
        what = f"tool call {tool}" if tool else "its action"
        line = effect.format(what=what, effect_id=event.fields.get("effect_id", ""))
        return f"[{event.seq:>4}] {event.node}: {line}"
    if event.kind in {"transition", "run_completed", "run_failed", "run_waiting", "run_parked"}:
        return None
    detail = event.fields.get("message", "")
    return f"[{event.seq:>4}] {event.node or '-'}: {event.kind} {detail}".rstrip()


class Progress:
    """Base: subscribes to the bus for the duration of a ``with`` block.

    Given a ``run_id``, only that run's events are shown: the child runs a run waits for
    may be driven by the same engine (see :func:`~phasegraph.worker.drive_locally`).
    """

    def __init__(self, bus: EventBus, run_id: str = "") -> None:
        self._bus = bus
        self._run_id = run_id
        self._unsubscribe: Callable[[], None] | None = None

    def __enter__(self) -> Self:
        self._unsubscribe = self._bus.subscribe(self._take)
        return self

    def _take(self, event: Event) -> None:
        if not self._run_id or event.run_id == self._run_id:
            self.on_event(event)

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

    def __init__(self, bus: EventBus, stream: IO[str], opening: str, run_id: str = "") -> None:
        super().__init__(bus, run_id)
        self._stream = stream
        if opening:
            print(opening, file=stream, flush=True)

    def on_event(self, event: Event) -> None:
        line = _line(event)
        if line is not None:
            print(line, file=self._stream, flush=True)


# A plain class, not a dataclass: see OpenGate in phasegraph.cli._gates.
class _Row:
    """One node's line of the table, kept from the committed state and the events."""

    __slots__ = ("counters", "state", "status", "steps", "turn")

    def __init__(self) -> None:
        self.status = "pending"
        self.state = ""
        self.steps = 0
        self.counters: Mapping[str, int] = {}
        self.turn: int | None = None  # the model's answers so far, as the llm action records

    def moved(self, node: NodeState) -> None:
        """Take what ``node`` (a committed state) says."""
        self.status, self.state, self.steps = str(node.status), node.state, node.steps
        self.counters = node.counters
        self.turn = _turn(node.payload) or self.turn

    def tokens(self) -> int | None:
        """Tokens spent, summed over the node's levels (``tokens``, ``outer/tokens``)."""
        spent = [n for key, n in self.counters.items() if key.rpartition("/")[2] == _TOKENS]
        return sum(spent) if spent else None

    def left(self, limits: Mapping[str, int]) -> str:
        """What is left of each budget, out of its limit."""
        return ", ".join(
            f"{key} {_count(limit - self.counters.get(key, 0))}/{_count(limit)}"
            for key, limit in limits.items()
        )


def _turn(payload: Mapping[str, Any]) -> int | None:
    turn = payload.get("turn")
    return turn if isinstance(turn, int) and not isinstance(turn, bool) else None


def _count(number: int) -> str:
    """A count in a few characters: 950, 12.3k, 100M."""
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(number) >= size:
            return f"{number / size:.3g}{unit}"
    return str(number)


class _Board:
    """Every node's status, state, steps, model turns and budgets, in DAG order."""

    def __init__(
        self,
        run_id: str,
        order: Sequence[str],
        state: RunState | None,
        limits: Mapping[str, Mapping[str, int]],
    ) -> None:
        self.run_id = run_id
        self.seq = state.seq if state else 0
        self.started = time.monotonic()
        self.limits = limits
        self.nodes: dict[str, _Row] = {node: _Row() for node in order}
        self.said: dict[str, str] = {}  # the tail of what a model is typing, per node
        if state is not None:
            for node_id, node in state.nodes.items():
                self.nodes.setdefault(node_id, _Row()).moved(node)

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
        row = self.nodes.setdefault(event.node, _Row())
        if event.kind in {"transition", "node_started"}:
            row.counters = event.fields.get("counters", {})
            row.turn = _turn(event.fields.get("payload", {})) or row.turn
        if event.kind == "transition":  # a reply fires one too: the gate's state is left
            row.state, row.steps = str(event.fields.get("dest", "")), row.steps + 1
        elif event.kind == "node_started":
            row.status, row.state = "running", str(event.fields.get("state", ""))
        elif event.kind.endswith("_request"):  # a human gate opened
            row.status = "waiting"
        elif event.kind.endswith("_reply"):
            row.status = "running"
        elif event.kind.startswith("node_"):
            row.status = event.kind.removeprefix("node_")

    def table(self) -> Table:
        """The table: the model and budget columns only when some node has them."""
        rows = self.nodes.items()
        said = self.said
        extra = {
            "turns": {n: str(r.turn) for n, r in rows if r.turn is not None},
            "tokens": {n: _count(t) for n, r in rows if (t := r.tokens()) is not None},
            "budget left": {n: r.left(self.limits[n]) for n, r in rows if self.limits.get(n)},
            "model": {n: " ".join(said[n].split()) for n in said},
        }
        shown = {column: cells for column, cells in extra.items() if cells}
        from rich.table import Table

        table = Table(box=None)
        for column in ("node", "status", "state", "steps", *shown):
            table.add_column(column)
        for node, row in rows:
            cells = [cells.get(node, "") for cells in shown.values()]
            table.add_row(node, row.status, row.state, str(row.steps), *cells)
        return table

    def title(self) -> str:
        done = sum(row.status in _DONE for row in self.nodes.values())
        elapsed = time.monotonic() - self.started
        return (
            f"run {self.run_id} · step {self.seq} · {done}/{len(self.nodes)} nodes done · "
            f"{elapsed:.1f} s"
        )


class _Live(Progress):
    """A live table of every node (status, state, steps) refreshed a few times a second."""

    def __init__(self, bus: EventBus, console: Console, board: _Board, opening: str) -> None:
        super().__init__(bus, board.run_id)
        self._console = console
        self._board = board
        if opening:
            console.print(opening, highlight=False, markup=False, soft_wrap=True)
        from rich.live import Live

        self._live = Live(self, console=console, refresh_per_second=8, transient=True)
        self._live.start(refresh=True)  # the first frame at once: every node, before any step

    def __rich__(self) -> Group:
        from rich.console import Group
        from rich.text import Text

        # The summary above the table, not its title: a title wraps at the table's width.
        return Group(Text(self._board.title(), style="italic", no_wrap=True), self._board.table())

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
    limits: Mapping[str, Mapping[str, int]] | None = None,
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
        limits: Node → counter key → its budget's limit (see :func:`budget_limits`).
    """
    stream = stream or sys.stderr
    if quiet:
        return Progress(bus)
    if stream.isatty():
        from rich.console import Console

        return _Live(bus, Console(file=stream), _Board(run_id, order, state, limits or {}), opening)
    return _Plain(bus, stream, opening, run_id)


def budget_limits(prepared: PreparedGraph) -> dict[str, dict[str, int]]:
    """Node → counter key → limit, for every budget of its machine and nested machines.

    A nested machine's counters are keyed ``state/budget`` (``execute/turns``), as the
    node's counters are.
    """
    return {
        node.id: _limits(prepared, node.machine, node.settings, "")
        for node in prepared.definition.nodes
    }


def _limits(
    prepared: PreparedGraph, machine: str, settings: Mapping[str, Any], prefix: str
) -> dict[str, int]:
    compiled = prepared.machines[machine]
    limits = {prefix + name: limit for name, limit in compiled.limits(settings).items()}
    for name, state in compiled.definition.states.items():
        if state.machine is not None:  # the loader refuses cycles of nested machines
            nested = prefix + name + PATH_SEPARATOR
            limits.update(_limits(prepared, state.machine, settings, nested))
    return limits
