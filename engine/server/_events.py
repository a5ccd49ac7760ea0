"""``GET /runs/{run_id}/events``: a run's events as Server-Sent Events.

The stream replays the events after ``Last-Event-ID`` (header, or the ``after`` query
parameter — ``last_event_id`` too — for clients that cannot set headers): the committed
history, and the live events of turns still in flight that the retention keeps; then it
follows the run until it finishes (see :mod:`phasegraph.server._feed`), so a client that
reconnects with the id of the last event it saw misses nothing and sees nothing twice.
While nothing happens, a comment line keeps proxies from closing the connection.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Final

from aiohttp import web

from phasegraph.errors import PhasegraphError, StoreUnavailableError
from phasegraph.events import Event, EventId
from phasegraph.server._access import still_signed_in
from phasegraph.server._feed import EventFeed, Subscription
from phasegraph.server._support import ENGINE, HUB, SETTINGS, fail
from phasegraph.views import jsonable

__all__ = ["routes"]

_log = logging.getLogger("phasegraph.server")

_HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # ask reverse proxies not to buffer the stream
}
_RETRY: Final = b"retry: 2000\n\n"
_KEEPALIVE: Final = b": keep-alive\n\n"


def _after(request: web.Request) -> EventId | None:
    for where, text in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.query.get("after")),
        ("last_event_id", request.query.get("last_event_id")),
    ):
        if text:
            try:
                return EventId.parse(text)
            except PhasegraphError as exc:
                fail(where, exc.message)
    return None


def frame(event: Event) -> bytes:
    """One event in the SSE wire format: ``id`` (none for a gap marker), ``event``, ``data``."""
    kind = " ".join(event.kind.split())  # a kind an action chose could hold a newline
    data = json.dumps(jsonable(event), sort_keys=True, default=str)
    head = f"id: {event.id}\n" if event.id else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


async def stream_events(request: web.Request) -> web.StreamResponse:
    """Stream the run's events: history after the cursor, then live, until it finishes."""
    run_id = request.match_info["run_id"]
    after = _after(request)
    hub = request.app[HUB]
    subscription = hub.subscribe(run_id)  # before reading history, so nothing falls between
    try:
        settings = request.app[SETTINGS]
        feed = EventFeed(request.app[ENGINE], run_id, after, settings.stream_retention)
        backlog = await feed.catch_up()  # an unknown run fails here, with a 404
        if after is not None and feed.reached < after.seq:
            fail("Last-Event-ID", f"{after} is beyond the run's last step ({feed.reached})")
        response = web.StreamResponse(headers=_HEADERS)
        await response.prepare(request)
        try:
            await response.write(_RETRY + b"".join(frame(e) for e in backlog))
            await _follow(request, response, feed, subscription)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away: nothing to clean up but the subscription
        return response
    finally:
        hub.unsubscribe(run_id, subscription)


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    feed: EventFeed,
    subscription: Subscription,
) -> None:
    settings, hub = request.app[SETTINGS], request.app[HUB]
    quiet_since = checked = time.monotonic()
    while not feed.terminal and not hub.closed:
        await subscription.wait(settings.poll_interval)
        if time.monotonic() - checked >= settings.poll_interval:
            checked = time.monotonic()
            if (refused := await still_signed_in(request)) is not None:
                # The client reconnects and is told why (401 or 403), as any request is.
                _log.warning("event stream of %s ends: %s", feed.run_id, refused)
                return
        events = feed.take(*subscription.drain())
        if events is None or (not events and not feed.streaming_here):
            # No bus event (a run stepped elsewhere, or a hole): the store has the truth.
            # Not while this process streams a turn of the run: its bus has every event,
            # and a read that spans the turn's commit would fold deltas the client is
            # about to get.
            try:
                events = await feed.catch_up()
            except StoreUnavailableError as exc:
                _log.warning("event stream of %s cannot read the store: %s", feed.run_id, exc)
                events = []
            except PhasegraphError as exc:  # the headers are sent: all we can do is end
                _log.error("event stream of %s ends: %s", feed.run_id, exc)
                return
        if events:
            await response.write(b"".join(frame(e) for e in events))
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settings.keepalive_interval:
            await response.write(_KEEPALIVE)
            quiet_since = time.monotonic()


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/runs/{run_id}/events", stream_events, allow_head=False)]
