"""Live events with ids, kept until their turn commits: what a reconnecting reader resumes from.

An action publishes live events while it runs (a model's streamed text, ``llm_delta``).
:class:`StreamLog` gives each one its :class:`~phasegraph.events.EventId` (after the last
committed step, numbered per driver) and keeps the last ``retention`` of each run in
memory until the step of their node commits: the committed step then stands for them
(an ``llm:`` turn that streamed commits its whole text as an ``llm_text`` event), so a
reader resuming after the commit reads the committed turn, and one resuming before it
reads the live events it missed, then the commit.

Nothing is written per live event unless :attr:`StreamSettings.durable` asks for it:
then the events are appended to the store in small batches (:meth:`Store.append_stream`)
so that a reader on another process (a server following a worker's run) or after a
restart reads them too, and the batches are dropped once every turn they stream has
committed. A reader folds what it reads the same way (:func:`unfolded`): a live event is
gone once a later committed step moved its node, or the run ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, final

from phasegraph._vocabulary import STREAM_RETENTION
from phasegraph.codec._live import decode_live, encode_live
from phasegraph.errors import CodecError, InputError, StoreError
from phasegraph.events import Event, EventId, live_event
from phasegraph.model import RunState, StepRecord
from phasegraph.store.base import Store

__all__ = ["StreamLog", "StreamSettings", "decode_batches", "unfolded"]

_log = logging.getLogger("phasegraph.run")


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How live events are kept for readers that reconnect.

    Attributes:
        retention: The live events kept per run until their turns commit (the newest);
            a reader that missed older ones is told how many it missed.
        durable: Also write live events to the store, in batches, so that a reader on
            another process or after a restart reads them (costs store writes per turn).
        batch: Live events per store write when ``durable``.
        flush_after: Seconds a partial batch waits for more before it is written anyway.
    """

    retention: int = STREAM_RETENTION
    durable: bool = False
    batch: int = 32
    flush_after: float = 0.2

    def __post_init__(self) -> None:
        if self.retention < 1:
            raise InputError(f"stream retention must be at least 1, not {self.retention}")
        if self.batch < 1:
            raise InputError(f"stream batch must be at least 1, not {self.batch}")


def _encode(events: Iterable[Event]) -> bytes:
    return encode_live((e.id, e.node, e.kind, e.fields, e.time.timestamp()) for e in events)


def decode_batches(run_id: str, batches: Iterable[bytes]) -> list[Event]:
    """The live events in a run's stored batches, in id order; unreadable batches skipped."""
    events: dict[EventId, Event] = {}
    for batch in batches:
        try:
            for id_text, node, kind, fields, time in decode_live(batch):
                at = EventId.parse(id_text)
                events[at] = Event(
                    id=id_text,
                    kind=kind,
                    run_id=run_id,
                    seq=at.seq,
                    time=datetime.fromtimestamp(time, UTC),
                    node=node,
                    fields=fields,
                    live=True,
                )
        except (InputError, CodecError) as exc:
            _log.warning("run %s: a stored live-event batch is unreadable: %s", run_id, exc)
    return [events[key] for key in sorted(events)]


def unfolded(events: Iterable[Event], moved: Mapping[str, int], ended: bool) -> list[Event]:
    """The live events a committed step does not stand for yet.

    Args:
        events: Live events, in id order.
        moved: Each node's last committed step the reader knows of.
        ended: The run has finished: every turn is committed or gone.
    """
    if ended:
        return []
    return [e for e in events if e.node is None or moved.get(e.node, -1) <= e.seq]


@final
class _RunStream:
    """One run's live events since its turns in flight began."""

    __slots__ = ("events", "k", "pending", "seq", "stored", "timer", "token", "trimmed")

    def __init__(self, retention: int) -> None:
        self.seq = -1
        self.token = 0
        self.k = 0
        self.events: deque[Event] = deque(maxlen=retention)
        self.trimmed: EventId | None = None  # the newest event retention let go
        self.pending: list[Event] = []  # durable: not written yet
        self.stored = 0  # durable: events written since the stream was last dropped
        self.timer: asyncio.TimerHandle | None = None


@final
class StreamLog:
    """Numbers, keeps and (when durable) writes the live events of the runs of one engine.

    Args:
        store: Where durable streams are written.
        settings: Retention and durability.
    """

    def __init__(self, store: Store, settings: StreamSettings | None = None) -> None:
        self._store = store
        self.settings = settings or StreamSettings()
        self._runs: dict[str, _RunStream] = {}
        self._writes: dict[str, asyncio.Task[None]] = {}

    def publish(
        self, state: RunState, token: int, node: str, kind: str, fields: Mapping[str, Any]
    ) -> Event:
        """Number a live event of ``node``'s running action and keep it."""
        run = self._runs.get(state.run_id)
        if run is None:
            run = self._runs[state.run_id] = _RunStream(self.settings.retention)
        if (run.seq, run.token) != (state.seq, token):
            run.seq, run.token, run.k = state.seq, token, 0
        run.k += 1
        event = live_event(state, node, kind, fields, EventId(state.seq, 1, token, run.k))
        if len(run.events) == run.events.maxlen:
            run.trimmed = EventId.of(run.events[0])
        run.events.append(event)
        if self.settings.durable:
            run.pending.append(event)
            if len(run.pending) >= self.settings.batch:
                self._flush(state.run_id, run)
            elif run.timer is None:
                loop = asyncio.get_running_loop()
                run.timer = loop.call_later(
                    self.settings.flush_after, self._flush, state.run_id, run
                )
        return event

    def committed(self, run_id: str, record: StepRecord) -> None:
        """Fold the live events a committed step stands for: its node's, or all at the end."""
        run = self._runs.get(run_id)
        if run is None:
            if record.status.terminal and self.settings.durable:
                # A turn another driver left in the store (it crashed mid-turn) ends here.
                self._write(run_id, lambda: self._store.drop_stream(run_id))
            return
        if record.status.terminal:
            kept: list[Event] = []
        elif record.node is None:
            return
        else:
            kept = [e for e in run.events if e.node != record.node]
            if len(kept) == len(run.events):
                return
        if kept:
            run.events = deque(kept, maxlen=run.events.maxlen)
            run.pending = [e for e in run.pending if e.node != record.node]
            return
        del self._runs[run_id]
        if run.timer is not None:
            run.timer.cancel()
        if run.stored:
            self._write(run_id, lambda: self._store.drop_stream(run_id))

    def forget(self, run_id: str) -> None:
        """Stop keeping the run's live events: this process stopped driving it.

        Its durable events not written yet are written first, for whoever takes the run
        over; its in-memory ones go (a turn in flight runs again under a new lease).
        """
        run = self._runs.pop(run_id, None)
        if run is not None and run.pending:
            self._runs[run_id] = run  # _flush writes only a run still kept
            self._flush(run_id, run)
            del self._runs[run_id]
        elif run is not None and run.timer is not None:
            run.timer.cancel()

    def retained(self, run_id: str) -> tuple[list[Event], EventId | None] | None:
        """The run's kept live events and the newest one retention let go, or ``None``.

        ``None``: this engine keeps no live event of the run (it does not drive it, or
        no turn of it is in flight).
        """
        run = self._runs.get(run_id)
        return None if run is None else (list(run.events), run.trimmed)

    async def idle(self) -> None:
        """Wait for the store writes started so far (tests and shutdown)."""
        while self._writes:
            await asyncio.gather(*self._writes.values(), return_exceptions=True)

    def _flush(self, run_id: str, run: _RunStream) -> None:
        if run.timer is not None:
            run.timer.cancel()
            run.timer = None
        if not run.pending or self._runs.get(run_id) is not run:
            return
        batch, run.pending = _encode(run.pending), []
        run.stored += 1
        retention = self.settings.retention
        if run.stored * self.settings.batch > 2 * retention:
            # Bounded in the store too: rewrite it as what memory keeps.
            kept = _encode(run.events)
            run.stored = 1

            async def rewrite() -> None:
                await self._store.drop_stream(run_id)
                await self._store.append_stream(run_id, kept)

            self._write(run_id, rewrite)
        else:
            self._write(run_id, lambda: self._store.append_stream(run_id, batch))

    def _write(self, run_id: str, op: Callable[[], Awaitable[None]]) -> None:
        """Start a store write of the run's stream after the ones already started."""
        previous = self._writes.get(run_id)

        async def chained() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await op()
            except StoreError as exc:  # a live stream is best effort: the steps are not
                _log.warning("run %s: live events not written to the store: %s", run_id, exc)

        task = asyncio.get_running_loop().create_task(chained())
        self._writes[run_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._writes.get(run_id) is finished:
                del self._writes[run_id]

        task.add_done_callback(done)
