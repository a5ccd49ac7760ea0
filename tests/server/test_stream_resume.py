"""Durable streams over a real socket: a client that drops mid-turn resumes with its last id.

A scripted model streams its answer and holds it in flight until the test releases it,
so "mid-turn" is a state the test controls, never a timing. The client that drops and
reconnects must read exactly what a client connected all along read: every event once,
in order, the model's deltas included; after the turn commits, the committed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from test_server import serving, settings_for, wait_for

from builders import REPO
from phasegraph import Engine, StreamSettings, open_store
from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.spec import load_graph_text
from phasegraph.testing import isolated_redis_url
from postgres_kit import isolated_postgres_url
from stream_kit import (
    STREAMING,
    WORDS,
    assert_ordered_once,
    committed_text,
    count_deltas,
    deltas,
    frames,
    held_answer,
    ids,
    texts,
)

ID_PATTERN = yaml.safe_load((REPO / "specs" / "openapi.yaml").read_text(encoding="utf-8"))[
    "components"
]["schemas"]["EventId"]["pattern"]


@contextlib.asynccontextmanager
async def model(
    monkeypatch: pytest.MonkeyPatch, hold_after: int
) -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(held_answer(hold_after), by_turn=True) as server:
        monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", server.base_url)
        yield server


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    kind = request.param
    if kind == "memory":
        yield "memory://"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    elif kind == "redis":
        async with isolated_redis_url(request.getfixturevalue("redis_url")) as url:
            yield url
    else:
        with isolated_postgres_url(request.getfixturevalue("postgres_url")) as url:
            yield url


@contextlib.asynccontextmanager
async def _started(engine: Engine, server: ScriptedModelServer) -> AsyncIterator[str]:
    """A run driven by the server's engine, its model's turn held in flight."""
    definition = load_graph_text(STREAMING, name="chat.yaml")
    driven = asyncio.create_task(engine.run(definition, {"task": "count"}, run_id="chat"))
    async with asyncio.timeout(30):
        await server.held.wait()
    try:
        yield "chat"
    finally:
        server.release_streams()
        await driven


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "durable"])
async def test_a_client_that_drops_mid_turn_resumes_with_every_event_once_in_order(
    store_url: str, durable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        model(monkeypatch, hold_after=4) as server,
        open_store(store_url) as store,
        Engine(store, streams=StreamSettings(durable=durable, batch=2)) as engine,
        serving(engine, settings_for(tmp_path)) as client,
    ):
        started = _started(engine, server)
        run_id = await started.__aenter__()
        # One client follows all along: what the dropped one must end up with.
        async with client.get(f"/runs/{run_id}/events") as whole:
            everything = await frames(whole, until=count_deltas(4))
            # The other reads two deltas and drops.
            async with client.get(f"/runs/{run_id}/events") as first:
                before = await frames(first, until=count_deltas(2))
            # Mid-turn, it comes back with its last id: the deltas it missed, then live.
            headers = {"Last-Event-ID": before[-1]["id"]}
            async with client.get(f"/runs/{run_id}/events", headers=headers) as again:
                after = await frames(again, until=count_deltas(2))
                assert [e["fields"]["text"] for e in deltas(after)] == [" w3", " w4"]
                server.release_streams()
                after += await frames(again)  # to the run's end
            everything += await frames(whole)
        assert before + after == everything
        assert_ordered_once(everything)
        # The ids are what the OpenAPI document says they are.
        assert all(re.fullmatch(ID_PATTERN, e["id"]) for e in everything)
        assert texts(everything) == WORDS
        assert committed_text(everything) == [WORDS]
        assert everything[-1]["kind"] == "run_completed"
        # After the commit the deltas are folded: a replay from before them reads the
        # committed turn, and nothing of the turn is kept beside the journal.
        async with client.get(f"/runs/{run_id}/events?after={before[0]['id']}") as late:
            replay = await frames(late)
        assert deltas(replay) == []
        assert committed_text(replay) == [WORDS]
        assert replay == [
            e for e in everything if ids([e])[0] > ids(before[:1])[0] and not deltas([e])
        ]
        await engine.streams.idle()
        assert await store.read_stream(run_id) == []


async def test_live_events_beyond_the_retention_are_reported_as_a_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        model(monkeypatch, hold_after=7) as server,
        open_store("memory://") as store,
        Engine(store, streams=StreamSettings(retention=3)) as engine,
        serving(engine, settings_for(tmp_path)) as client,
    ):
        started = _started(engine, server)
        run_id = await started.__aenter__()
        async with client.get(f"/runs/{run_id}/events") as first:
            before = await frames(first, until=count_deltas(1))
        # Seven deltas were streamed and three are kept: a client that left before the
        # first reads a gap (no id), then those three.
        left_at = [e for e in before if e["kind"] != "llm_delta" and e["sse_id"]][-1]["id"]
        headers = {"Last-Event-ID": left_at}
        async with client.get(f"/runs/{run_id}/events", headers=headers) as again:
            after = await frames(again, until=count_deltas(3))
        gap = after[0]
        assert gap["kind"] == "stream_gap"
        assert gap["sse_id"] is None
        assert gap["fields"]["after"] == left_at
        assert [e["fields"]["text"] for e in deltas(after)] == [" w5", " w6", " w7"]
        assert gap["fields"]["resumes_at"] == deltas(after)[0]["id"]
        assert before[-2]["kind"] == "stream_gap"  # the first client was told of it too
        await started.__aexit__(None, None, None)


async def test_a_bad_last_event_id_is_a_400_naming_what_is_wrong(tmp_path: Path) -> None:
    async with (
        open_store("memory://") as store,
        Engine(store) as engine,
        serving(engine, settings_for(tmp_path)) as client,
    ):
        created = await client.post("/runs", json={"graph": "hello", "run_id": "mine"})
        assert created.status == 201
        await wait_for(client, "mine", lambda v: v["status"] == "completed")
        for header in ("x", "12-", "3+1", "3+1.0", "-1-0", "1-2-3", "1" * 40 + "-0"):
            response = await client.get("/runs/mine/events", headers={"Last-Event-ID": header})
            assert response.status == 400, header
            problem = (await response.json())["problems"][0]
            assert problem["field"] == "Last-Event-ID"
            assert "is not an event id (expected SEQ-N" in problem["message"]
        response = await client.get("/runs/mine/events?after=soon")
        assert response.status == 400
        assert (await response.json())["problems"][0]["field"] == "after"
        for beyond in ("999-0", "999+1.1"):
            response = await client.get("/runs/mine/events", headers={"Last-Event-ID": beyond})
            assert response.status == 400
            assert "beyond the run's last step" in (await response.json())["problems"][0]["message"]
