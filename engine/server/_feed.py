"""A run's event log for streaming: committed history first, then live events, no gaps.

The store's step history *is* the event log: the events of a record are derived with
:func:`~phasegraph.events.events_for` and numbered ``"{seq}-{n}"``, so a client can
resume after any event id. Live events (a model's streamed text) are numbered after the
step they follow (``"{seq}+{token}.{k}"``) and kept until their turn commits
(:mod:`phasegraph.run._stream`): by the engine that drives the run, and in the store too
when streams are durable. An :class:`EventFeed` reads the history and the live events
kept after a cursor, merged in id order, then follows the run: events of runs stepped by
this process arrive from the engine's :class:`~phasegraph.events.EventBus` through the
:class:`EventHub`; runs stepped elsewhere are caught up by reading the store again. Bus
events are a shortcut, never the source of truth: whenever one would leave a hole (a
skipped seq, a dropped event) the feed reads again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final, final

from phasegraph._vocabulary import STREAM_RETENTION
from phasegraph.api import Engine
from phasegraph.events import Event, EventBus, EventId, ends_run, events_for
from phasegraph.model import RunStatus, StepRecord
from phasegraph.run._stream import decode_batches, unfolded

__all__ = ["GAP_EVENT", "EventFeed", "EventHub", "Subscription"]

GAP_EVENT: Final = "stream_gap"
"""Sent (without an id) where live events a reader missed fell out of the retention."""

_QUEUE_LIMIT: Final = 4096


@final
class Subscription:
    """Events of one run delivered by the bus, waiting to be read; bounded."""

    def __init__(self) -> None:
        self._events: deque[Event] = deque()
        self._wake = asyncio.Event()
        self.overflowed = False
        """Events were dropped because the reader fell behind; reread the store."""

    def push(self, event: Event) -> None:
        """Queue ``event`` (called synchronously by the bus)."""
        if len(self._events) >= _QUEUE_LIMIT:
            self.overflowed = True
        else:
            self._events.append(event)
        self._wake.set()

    def wake(self) -> None:
        """Wake the reader without an event (the hub is closing)."""
        self._wake.set()

    async def wait(self, seconds: float) -> None:
        """Return when an event arrives or after ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    def drain(self) -> tuple[list[Event], bool]:
        """Take the queued events, and whether any were dropped since the last drain."""
        events, overflowed = list(self._events), self.overflowed
        self._events.clear()
        self.overflowed = False
        return events, overflowed


@final
class EventHub:
    """One bus listener dispatching events to the subscriptions of their run.

    Args:
        bus: The engine's event bus.
    """

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._subscribers: dict[str, set[Subscription]] = {}
        # On the bus only while someone reads a stream: with no listener, runs skip
        # building events altogether.
        self._unsubscribe: Callable[[], None] | None = None
        self.closed = False
        """Set when the server shuts down: every feed should end."""

    def _publish(self, event: Event) -> None:
        for subscription in self._subscribers.get(event.run_id, ()):
            subscription.push(event)

    def subscribe(self, run_id: str) -> Subscription:
        """Start receiving ``run_id``'s events; pair with :meth:`unsubscribe`."""
        subscription = Subscription()
        if self._unsubscribe is None and not self.closed:
            self._unsubscribe = self._bus.subscribe(self._publish)
        self._subscribers.setdefault(run_id, set()).add(subscription)
        return subscription

    def unsubscribe(self, run_id: str, subscription: Subscription) -> None:
        """Stop receiving events (idempotent)."""
        subscribers = self._subscribers.get(run_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[run_id]
        if not self._subscribers and self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def close(self) -> None:
        """Leave the bus and wake every subscriber so its feed ends (idempotent)."""
        self.closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.wake()


@final
class EventFeed:
    """The events of one run after a cursor, each exactly once and in id order.

    Args:
        engine: Reads the run's history, and keeps the live events of runs it drives.
        run_id: The run.
        after: The last event the client has (``Last-Event-ID``), or ``None`` for all.
        retention: The most live events replayed from the store (older ones: a gap).
    """

    def __init__(
        self, engine: Engine, run_id: str, after: EventId | None, retention: int = STREAM_RETENTION
    ) -> None:
        self._engine = engine
        self._run_id = run_id
        self._cursor = after
        self._retention = retention
        # Records up to `_seen` were fully read; the cursor's own step is read again (a
        # committed cursor's step may have more events; a live one's are filtered out).
        self._seen = -1 if after is None else after.seq - 1
        self._moved: dict[str, int] = {}  # each node's last step read: folds live events
        self._status = RunStatus.RUNNING
        self.terminal = False
        """The run finished and its final events were returned."""

    @property
    def run_id(self) -> str:
        """The run."""
        return self._run_id

    @property
    def streaming_here(self) -> bool:
        """Whether this process drives the run and streams a turn of it now."""
        return self._engine.streams.retained(self._run_id) is not None

    @property
    def reached(self) -> int:
        """The last step whose events were all read (-1 before any)."""
        return self._seen

    def take(self, events: list[Event], overflowed: bool) -> list[Event] | None:
        """Accept bus events; ``None`` means they leave a hole: call :meth:`catch_up`."""
        if overflowed:
            return None
        reached = self._seen
        for event in events:
            if event.live:
                if event.seq > reached:
                    return None  # after a step we never got: the store has it
            elif event.seq > reached + 1:
                return None  # a step whose events we never got: the store has them
            else:
                reached = max(reached, event.seq)
        self._seen = reached
        return self._accept(events)

    async def catch_up(self) -> list[Event]:
        """The events after the cursor: committed ones from the store, then live ones kept.

        Raises:
            RunNotFoundError: No such run.
        """
        # Read from the last fully-read record too: its status is the `previous` status
        # events_for needs for the next one (waiting → running emits no event).
        records = await self._engine.history(self._run_id, start=max(self._seen, 0))
        previous = RunStatus.RUNNING
        fresh: list[Event] = []
        for record in records:
            if record.seq > self._seen:
                fresh += events_for(self._run_id, record, previous)
                self._seen = record.seq
                self._moves(record)
            previous = record.status
        if records:
            self._status = previous
        fresh += await self._live()
        fresh.sort(key=_order)
        taken = self._accept(fresh)
        if records and previous.terminal:
            self.terminal = True
        return taken

    def _moves(self, record: StepRecord) -> None:
        if record.node is not None:
            self._moved[record.node] = record.seq
        for node in record.nodes:
            self._moved[node] = record.seq

    async def _live(self) -> list[Event]:
        """The live events kept after the cursor, up to the last step read."""
        if self._status.terminal:
            return []
        missed: int | None = 0
        streams = self._engine.streams
        kept = streams.retained(self._run_id)
        events: list[Event] = []
        if kept is None or streams.settings.durable:
            # Driven elsewhere (or here since a restart): what a durable driver wrote.
            batches = await self._engine.store.read_stream(self._run_id)
            events = decode_batches(self._run_id, batches)
        if kept is not None:  # this process drives the run
            known = {e.id for e in events}
            events = sorted([*events, *(e for e in kept[0] if e.id not in known)], key=EventId.of)
            trimmed = kept[1]
            if trimmed is not None and (self._cursor is None or self._cursor < trimmed):
                missed = None  # how many is not known
        events = [
            e
            for e in unfolded(events, self._moved, ended=False)
            if e.seq <= self._seen and (self._cursor is None or EventId.of(e) > self._cursor)
        ]
        if len(events) > self._retention:
            missed, events = len(events) - self._retention, events[-self._retention :]
        if missed != 0 and events:
            return [_gap(events[0], self._cursor, missed), *events]
        return events

    def _accept(self, events: list[Event]) -> list[Event]:
        fresh = [
            e for e in events if not e.id or self._cursor is None or EventId.of(e) > self._cursor
        ]
        for event in fresh:
            if event.id:
                self._cursor = EventId.of(event)
            if ends_run(event):
                self.terminal = True
        return fresh


def _order(event: Event) -> tuple[EventId, int]:
    if event.kind == GAP_EVENT and not event.id:  # just before the first event it names
        return EventId.parse(str(event.fields["resumes_at"])), 0
    return EventId.of(event), 1


def _gap(first: Event, after: EventId | None, missed: int | None) -> Event:
    """The marker of live events that fell out of the retention before ``first``."""
    fields = {"after": None if after is None else str(after), "resumes_at": first.id}
    return Event(
        id="",
        kind=GAP_EVENT,
        run_id=first.run_id,
        seq=first.seq,
        time=first.time,
        node=first.node,
        fields={**fields, "missed": missed},
        live=True,
    )
