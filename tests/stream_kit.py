"""Reading a run's event stream as a client does: frames with their ids, gap markers too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import ClientResponse

from model_kit import agent_node, graph_text
from phasegraph.events import EventId

Frames = list[dict[str, Any]]

WORDS = " ".join(f"w{n}" for n in range(1, 11))
"""The scripted answer: ten words, so ten deltas."""

STREAMING = graph_text(agent_node({"stream": True, "tools": []}))
"""One agent node whose model streams its answer."""


def held_answer(hold_after: int) -> list[dict[str, Any]]:
    """The script: the answer streams ``hold_after`` words, then waits for release_streams()."""
    return [{"content": WORDS, "hold_after": hold_after}]


async def frames(response: ClientResponse, until: Callable[[Frames], bool] | None = None) -> Frames:
    """Read SSE frames (their JSON data, and ``sse_id``: the ``id:`` line or None)."""
    found: Frames = []
    fields: dict[str, str] = {}
    async with asyncio.timeout(30):
        async for raw in response.content:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "data" in fields:
                event = json.loads(fields["data"])
                event["sse_id"] = fields.get("id")
                assert event["kind"] == fields["event"]
                found.append(event)
                if until is not None and until(found):
                    return found
            fields = {}
    return found


def deltas(found: Frames) -> Frames:
    """The model's streamed pieces among ``found``."""
    return [e for e in found if e["kind"] == "llm_delta"]


def count_deltas(n: int) -> Callable[[Frames], bool]:
    """``until``: ``n`` deltas read."""
    return lambda found: len(deltas(found)) >= n


def ids(found: Frames) -> list[EventId]:
    """The ids of the frames that have one, checked against their data."""
    out = []
    for event in found:
        if event["sse_id"] is not None:
            assert event["sse_id"] == event["id"]
            out.append(EventId.parse(event["sse_id"]))
    return out


def assert_ordered_once(found: Frames) -> None:
    """Every id is new and follows the one before."""
    seen = ids(found)
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)


def texts(found: Frames) -> str:
    """The streamed text the frames carry."""
    return "".join(e["fields"]["text"] for e in deltas(found))


def committed_text(found: Frames) -> list[str]:
    """The committed turns' whole texts (``llm_text``)."""
    return [e["fields"]["text"] for e in found if e["kind"] == "llm_text"]
