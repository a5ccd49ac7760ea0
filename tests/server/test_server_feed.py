"""The server's event plumbing: when a stream ends, and when runs pay for events."""

from datetime import UTC, datetime

from phasegraph.api import Engine
from phasegraph.events import Event, EventBus
from phasegraph.server._feed import EventFeed, EventHub
from phasegraph.store.memory import MemoryStore


def _event(seq: int, n: int, kind: str, node: str | None) -> Event:
    return Event(id=f"{seq}-{n}", kind=kind, run_id="r", seq=seq, time=datetime.now(UTC), node=node)


def test_an_action_event_named_like_a_run_end_does_not_end_the_stream() -> None:
    feed = EventFeed(Engine(MemoryStore()), "r", None)
    assert feed.take([_event(0, 0, "run_completed", "worker")], overflowed=False)
    assert not feed.terminal
    assert feed.take([_event(1, 0, "run_completed", None)], overflowed=False)
    assert feed.terminal


def test_the_hub_listens_only_while_a_stream_is_open() -> None:
    bus = EventBus()
    hub = EventHub(bus)
    assert not bus.listening  # runs skip building events
    first, second = hub.subscribe("a"), hub.subscribe("b")
    assert bus.listening
    hub.unsubscribe("a", first)
    assert bus.listening
    hub.unsubscribe("b", second)
    assert not bus.listening
    hub.close()
    hub.subscribe("a")
    assert not bus.listening  # a closed hub never rejoins
