"""Typed events and an in-process fan-out (CLI progress now, server streams later).

Events are derived from committed step records, never raised before the commit, so a
crash can never show an event for a step that did not happen. The one exception is
explicit: a *live* event (``live=True``, e.g. a model's streamed text) is published while
an action runs and is never committed as such; the history never shows it.

Every event has an :class:`EventId`, ordered within its run: ``"{seq}-{n}"`` for the
``n``-th event of committed step ``seq``, and ``"{seq}+{token}.{k}"`` for the ``k``-th
live event published after step ``seq`` by the driver holding lease ``token`` (a driver
that takes the run over after a crash holds a greater token, so its live events come
after its predecessor's). Live events sort after their step's committed events and
before the next step's, in the order they were published: a reader can resume after any
id, whichever process drove the run (see :mod:`phasegraph.run._stream`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from phasegraph.errors import InputError
from phasegraph.model import EMPTY, NodeStatus, RunState, RunStatus, StepRecord, empty_field

__all__ = [
    "Event",
    "EventBus",
    "EventId",
    "Listener",
]

_EVENT_ID: Final = re.compile(
    r"(0|[1-9][0-9]{0,17})(?:-(0|[1-9][0-9]{0,8})|\+(0|[1-9][0-9]{0,17})\.([1-9][0-9]{0,17}))"
)


@dataclass(frozen=True, slots=True, order=True)
class EventId:
    """An event's place in its run, ordered as the run produced its events.

    Attributes:
        seq: The committed step that carried it, or the last one committed before it.
        live: 0 for a committed event, 1 for a live one (after every event of ``seq``).
        token: The lease token of the driver that published a live event (0 otherwise).
        n: The event's index in its step (committed), or its number since ``seq`` (live,
            from 1).
    """

    seq: int
    live: int = 0
    token: int = 0
    n: int = 0

    @classmethod
    def parse(cls, text: str) -> EventId:
        """Parse ``"{seq}-{n}"`` or ``"{seq}+{token}.{k}"``.

        Raises:
            InputError: ``text`` is not an event id.
        """
        match = _EVENT_ID.fullmatch(text.strip())
        if match is None:
            raise InputError(
                f"{text!r:.60} is not an event id (expected SEQ-N, e.g. 12-0, "
                "or SEQ+TOKEN.K, e.g. 12+3.7)"
            )
        seq, n, token, k = match.groups()
        if n is not None:
            return cls(int(seq), 0, 0, int(n))
        return cls(int(seq), 1, int(token), int(k))

    @classmethod
    def of(cls, event: Event) -> EventId:
        """The id of ``event`` (which must have one)."""
        return cls.parse(event.id)

    def __str__(self) -> str:
        if self.live:
            return f"{self.seq}+{self.token}.{self.n}"
        return f"{self.seq}-{self.n}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something that happened in a run.

    Attributes:
        id: Its :class:`EventId` as text: unique and ordered within the run.
        kind: ``node_started``, ``transition``, ``node_completed``, ``node_failed``,
            ``node_skipped``, ``run_completed``, ``run_failed``, ``run_waiting``, or a kind an
            action or middleware raised (``loop_detected``, ``phase_violation``, ...).
        run_id: The run.
        seq: The step that carried it.
        time: When that step was committed.
        node: The node concerned, if any.
        fields: Kind-specific details. ``transition`` (a reply fires one too) and
            ``node_started`` carry the node's ``counters`` and ``payload`` when it has them.
        live: Published while an action runs and never committed as such (``seq`` is the
            last committed step); a model's streamed text is folded into its committed
            turn when the turn commits.
    """

    id: str
    kind: str
    run_id: str
    seq: int
    time: datetime
    node: str | None = None
    fields: Mapping[str, Any] = empty_field()
    live: bool = False


_NODE_EVENT = {
    NodeStatus.COMPLETED: "node_completed",
    NodeStatus.FAILED: "node_failed",
    NodeStatus.SKIPPED: "node_skipped",
    NodeStatus.CANCELLED: "node_cancelled",
}
_RUN_EVENT = {
    RunStatus.COMPLETED: "run_completed",
    RunStatus.FAILED: "run_failed",
    RunStatus.WAITING: "run_waiting",
    RunStatus.PARKED: "run_parked",
    RunStatus.CANCELLED: "run_cancelled",
}
_RUN_END_EVENTS = frozenset(kind for status, kind in _RUN_EVENT.items() if status.terminal)


def ends_run(event: Event) -> bool:
    """Whether ``event`` is the run's own completed/failed/cancelled event.

    Run events carry no node; an action may emit an event of the same kind, but it
    carries the node it ran for.
    """
    return event.node is None and event.kind in _RUN_END_EVENTS


def _spent(record: StepRecord, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with the moved node's counters and payload, when it has them.

    What a progress display shows: budget units spent, the model's turn (an ``llm:``
    action's payload carries ``turn``).
    """
    node = record.nodes.get(record.node) if record.node is not None else None
    if node is not None:
        if node.counters:
            fields["counters"] = dict(node.counters)
        if node.payload:
            fields["payload"] = dict(node.payload)
    return fields


def events_for(run_id: str, record: StepRecord, previous: RunStatus) -> list[Event]:
    """The events a committed record stands for, in order."""
    raw: list[tuple[str, str | None, Mapping[str, Any]]] = []
    if record.kind == "start":
        raw.append(("node_started", record.node, _spent(record, {"state": "/".join(record.dest)})))
    elif record.kind in ("transition", "reply"):  # a reply fires its trigger too
        fields = {
            "source": "/".join(record.source),
            "trigger": record.trigger,
            "dest": "/".join(record.dest),
        }
        raw.append(("transition", record.node, _spent(record, fields)))
    elif record.kind == "reserve" and record.ledger is not None:  # a model call's most
        entry = record.ledger
        amounts = {k: entry.arguments[k] for k in ("tokens", "money") if entry.arguments.get(k)}
        raw.append(("spend_reserved", record.node, {"effect_id": entry.id, **amounts}))
    elif record.ledger is not None:  # an effect's intent, or a tool call's result
        entry = record.ledger
        what = "effect_intent" if entry.result is None else "effect_result"
        raw.append((what, record.node, {"effect_id": entry.id, "tool": entry.tool}))
    raw.extend((str(e.get("kind", "event")), record.node, e) for e in record.events)
    for node_id, node in record.nodes.items():
        kind = _NODE_EVENT.get(node.status)
        if kind is not None:
            error = node.error
            if error is None and kind == "node_failed":  # failed by its machine: say why
                error = next((e.message for e in record.errors if e.node == node_id), None)
            fields = {"outcome": node.outcome, "error": error}
            raw.append((kind, node_id, {k: v for k, v in fields.items() if v is not None}))
    if record.status is not previous and record.status in _RUN_EVENT:
        raw.append((_RUN_EVENT[record.status], None, EMPTY))
    return [
        Event(
            id=f"{record.seq}-{n}",
            kind=kind,
            run_id=run_id,
            seq=record.seq,
            time=record.time,
            node=node,
            fields=fields,
        )
        for n, (kind, node, fields) in enumerate(raw)
    ]


def live_event(
    state: RunState, node: str, kind: str, fields: Mapping[str, Any], id: EventId
) -> Event:
    """A live event of ``node``'s running action, published at once and never committed."""
    return Event(
        id=str(id),
        kind=kind,
        run_id=state.run_id,
        seq=state.seq,
        time=datetime.now(UTC),
        node=node,
        fields=fields,
        live=True,
    )


Listener = Callable[[Event], None]
"""What :meth:`EventBus.subscribe` takes: called with each event as it is published."""


class EventBus:
    """Synchronous fan-out to listeners; a listener must not block."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener``; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @property
    def listening(self) -> bool:
        """Whether anyone is subscribed (so events need building at all)."""
        return bool(self._listeners)

    def publish(self, event: Event) -> None:
        """Deliver ``event`` to every listener, in subscription order."""
        for listener in tuple(self._listeners):
            listener(event)
