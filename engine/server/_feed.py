"""A run's event log for streaming: committed history first, then live events, no gaps.

The store's step history *is* the event log: the events of a record are derived with
:func:`~phasegraph.events.events_for` and numbered ``"{seq}-{n}"``, so a client can
resume after any event id. An :class:`EventFeed` reads the history after a cursor, then
follows the run: events of runs stepped by this process arrive from the engine's
:class:`~phasegraph.events.EventBus` through the :class:`EventHub`; runs stepped
elsewhere are caught up by reading the store again. Bus events are a shortcut, never the
source of truth: whenever one would leave a hole (a skipped seq, a dropped event) the feed
rereads the store, where every published event's step is already committed. Live events
(a model's streamed text) pass straight through: they have no id and move no cursor.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

from phasegraph.api import Engine
from phasegraph.errors import InputError
from phasegraph.events import Event, EventBus, ends_run, events_for
from phasegraph.model import RunStatus

__all__ = ["EventFeed", "EventHub", "EventId", "Subscription"]

_EVENT_ID: Final = re.compile(r"(0|[1-9][0-9]{0,17})-(0|[1-9][0-9]{0,8})")
_QUEUE_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True, order=True)
class EventId:
    """An event's place in its run: the step ``seq`` and its index ``n`` in that step."""

    seq: int
    n: int

    @classmethod
    def parse(cls, text: str) -> EventId:
        """Parse ``"{seq}-{n}"``.

        Raises:
            InputError: ``text`` is not an event id.
        """
        match = _EVENT_ID.fullmatch(text.strip())
        if match is None:
            raise InputError(f"{text!r:.40} is not an event id (expected SEQ-N, e.g. 12-0)")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def of(cls, event: Event) -> EventId:
        """The id of ``event``."""
        seq, _, n = event.id.partition("-")
        return cls(int(seq), int(n))


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
    """The events of one run after a cursor, each exactly once and in order.

    Args:
        engine: Reads the run's history.
        run_id: The run.
        after: The last event the client has (``Last-Event-ID``), or ``None`` for all.
    """

    def __init__(self, engine: Engine, run_id: str, after: EventId | None) -> None:
        self._engine = engine
        self._run_id = run_id
        self._cursor = after
        # Records up to `_seen` were fully read; the cursor's own step may have more events.
        self._seen = -1 if after is None else after.seq - 1
        self.terminal = False
        """The run finished and its final events were returned."""

    @property
    def run_id(self) -> str:
        """The run."""
        return self._run_id

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
                continue  # never committed: not part of the log the cursor walks
            if event.seq > reached + 1:
                return None  # a step whose events we never got: the store has them
            reached = max(reached, event.seq)
        self._seen = reached
        taken: list[Event] = []
        for event in events:
            taken += [event] if event.live else self._accept([event])
        return taken

    async def catch_up(self) -> list[Event]:
        """The events committed after the cursor, read from the store.

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
                fresh += self._accept(events_for(self._run_id, record, previous))
                self._seen = record.seq
            previous = record.status
        if records and previous.terminal:
            self.terminal = True
        return fresh

    def _accept(self, events: list[Event]) -> list[Event]:
        fresh = [e for e in events if self._cursor is None or EventId.of(e) > self._cursor]
        if fresh:
            self._cursor = EventId.of(fresh[-1])
            if any(ends_run(e) for e in fresh):
                self.terminal = True
        return fresh
