"""The HTTP API over a real socket: runs, live events, human gates, restarts, auth.

Each test serves an app from :func:`phasegraph.server._app.create_app` with aiohttp's test
server (a real TCP listener on 127.0.0.1) and talks to it with an HTTP client. The
helpers here are shared by the other ``test_server_*`` modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from builders import REPO, TESTS
from phasegraph import Engine, cli
from phasegraph.server import ServerSettings, create_app
from phasegraph.store.memory import MemoryStore

FIXTURES = TESTS / "fixtures" / "server"
GATED = (FIXTURES / "gated.yaml").read_text(encoding="utf-8")
LOOPING = (FIXTURES / "looping.yaml").read_text(encoding="utf-8")
ALLOWED = frozenset({"gate_actions", "phasegraph.concerns.spec"})
SIDE_GATE = """
graph: side_gate
nodes:
  - id: gate
    machine: task
    bind:
      run: {human: approval, payload: {question: "ship it?"}, triggers: [ok, fail]}
  - id: side
    machine: loop
    writes: [side]
    bind:
      work: {python: "gate_actions:work", triggers: [again, stop]}
"""

Events = list[dict[str, Any]]


@pytest.fixture
def actions_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the fixture graphs' ``gate_actions`` module importable by name."""
    monkeypatch.syspath_prepend(str(FIXTURES))


def settings_for(tmp_path: Path, **changes: Any) -> ServerSettings:
    """Settings for tests: fast polling, the fixture modules allowed, uploads in tmp."""
    values: dict[str, Any] = {
        "upload_dir": tmp_path / "uploads",
        "allow_python_modules": ALLOWED,
        "poll_interval": 0.05,
        "adopt_interval": 0.05,
        **changes,
    }
    return ServerSettings(**values)


@contextlib.asynccontextmanager
async def serving(engine: Engine, settings: ServerSettings) -> AsyncIterator[TestClient]:
    """Serve ``create_app(engine)`` on 127.0.0.1 and yield a client; shut down on exit."""
    async with TestClient(TestServer(create_app(engine, settings=settings))) as client:
        yield client


async def sse(response: ClientResponse, until: Callable[[Events], bool] | None = None) -> Events:
    """Read Server-Sent Events (their JSON data) until ``until`` holds or the stream ends."""
    events: Events = []
    fields: dict[str, str] = {}
    async with asyncio.timeout(15):
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
                assert event["id"] == fields["id"]
                assert event["kind"] == fields["event"]
                events.append(event)
                if until is not None and until(events):
                    return events
            fields = {}
    return events


async def view(client: TestClient, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}")
    assert response.status == 200, await response.text()
    result: dict[str, Any] = await response.json()
    return result


async def wait_for(
    client: TestClient, run_id: str, done: Callable[[dict[str, Any]], bool], seconds: float = 15
) -> dict[str, Any]:
    """Poll ``GET /runs/{run_id}`` until ``done(view)``."""
    async with asyncio.timeout(seconds):
        while True:
            current = await view(client, run_id)
            if done(current):
                return current
            await asyncio.sleep(0.02)


async def create(client: TestClient, graph_yaml: str, run_input: dict[str, Any]) -> str:
    response = await client.post("/runs", json={"graph_yaml": graph_yaml, "input": run_input})
    assert response.status == 201, await response.text()
    run_id: str = (await response.json())["run_id"]
    assert response.headers["Location"] == f"/runs/{run_id}"
    return run_id


def event_key(event: dict[str, Any]) -> tuple[int, int]:
    seq, _, n = event["id"].partition("-")
    return int(seq), int(n)


async def test_start_stream_gate_reply_complete(tmp_path: Path, actions_path: None) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, GATED, {"topic": "caching"})
        async with client.get(f"/runs/{run_id}/events") as stream:
            assert stream.status == 200
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            first = await sse(stream, until=lambda evs: evs[-1]["kind"] == "run_waiting")
            assert "spec_review_request" in [e["kind"] for e in first]
            waiting = await view(client, run_id)
            assert waiting["status"] == "waiting"
            assert waiting["nodes"]["spec"]["state"] == "review_pending"
            assert waiting["nodes"]["build"]["status"] == "pending"
            (interrupt,) = waiting["interrupts"]
            assert interrupt["id"] == f"{run_id}:spec:spec_review"
            assert interrupt["payload"] == {"spec": "spec for caching"}
            assert interrupt["deadline"] is not None

            rejected = await client.post(
                f"/runs/{run_id}/reply",
                json={
                    "interrupt_id": interrupt["id"],
                    "trigger": "reject",
                    "payload": {"feedback": "add eviction"},
                },
            )
            assert rejected.status == 200, await rejected.text()
            second = await sse(stream, until=lambda evs: evs[-1]["kind"] == "run_waiting")
            again = await view(client, run_id)
            assert again["interrupts"][0]["payload"] == {
                "spec": "spec for caching (revised: add eviction)"
            }
            confirmed = await client.post(
                f"/runs/{run_id}/reply",
                json={"interrupt_id": interrupt["id"], "trigger": "confirm"},
            )
            assert confirmed.status == 200, await confirmed.text()
            last = await sse(stream)  # the server ends the stream once the run is done
        events = first + second + last
        kinds = [e["kind"] for e in events]
        assert kinds.count("spec_review_reply") == 2
        assert kinds[-1] == "run_completed"
        assert [event_key(e) for e in events] == sorted({event_key(e) for e in events})
        snapshot = await (await client.get(f"/runs/{run_id}/snapshot")).json()
        assert snapshot["status"] == "completed"
        assert snapshot["data"]["built"] == "built spec for caching (revised: add eviction)"


async def test_sse_reconnect_with_last_event_id_loses_and_repeats_nothing(
    tmp_path: Path, actions_path: None
) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, LOOPING, {"loops": 8, "delay": 0.05})
        got: Events = []
        for cut in (3, 4, 5):  # drop the connection mid-run, three times
            headers = {"Last-Event-ID": got[-1]["id"]} if got else {}
            async with client.get(f"/runs/{run_id}/events", headers=headers) as stream:
                got += await sse(stream, until=lambda evs, cut=cut: len(evs) >= cut)
        assert (await view(client, run_id))["status"] == "running"  # really reconnected live
        async with client.get(f"/runs/{run_id}/events?last_event_id={got[-1]['id']}") as stream:
            got += await sse(stream)
        async with client.get(f"/runs/{run_id}/events") as stream:
            everything = await sse(stream)  # the whole log, read after the run finished
    assert got[-1]["kind"] == "run_completed"
    assert got == everything
    assert len({e["id"] for e in got}) == len(got)


async def test_events_of_a_run_stepped_by_another_process_arrive_by_polling(
    tmp_path: Path, actions_path: None
) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        other = Engine(store)  # another writer: its bus is not the server's
        started = asyncio.Event()

        async def elsewhere() -> None:
            graph = other.prepare(FIXTURES / "looping.yaml")
            async with other.start(graph, {"loops": 4, "delay": 0.03}, run_id="elsewhere") as run:
                started.set()
                async for _ in run:
                    pass

        driver = asyncio.create_task(elsewhere())
        await started.wait()
        async with client.get("/runs/elsewhere/events") as stream:
            streamed = await sse(stream)
        await driver
        async with client.get("/runs/elsewhere/events") as stream:
            assert streamed == await sse(stream)
    assert streamed[-1]["kind"] == "run_completed"


async def test_reply_while_other_nodes_run_is_applied_between_steps(
    tmp_path: Path, actions_path: None
) -> None:
    release = tmp_path / "release"  # the side loop counts until this exists
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_input = {"loops": 100000, "delay": 0.03, "until": str(release)}
        run_id = await create(client, SIDE_GATE, run_input)
        gated = await wait_for(client, run_id, lambda v: bool(v["interrupts"]))
        assert gated["status"] == "running"  # the side node still works
        reply = {"interrupt_id": f"{run_id}:gate:run", "trigger": "ok"}
        answered = await client.post(f"/runs/{run_id}/reply", json=reply)
        assert answered.status == 200, await answered.text()
        body = await answered.json()
        assert body["nodes"]["gate"]["status"] == "completed"
        assert body["status"] == "running"
        assert body["nodes"]["side"]["status"] == "running"
        release.touch()
        done = await wait_for(client, run_id, lambda v: v["status"] == "completed")
        # The side loop went on past the reply, each of its steps counted once.
        steps = done["nodes"]["side"]["steps"]
        assert steps > body["nodes"]["side"]["steps"]
        snapshot = await (await client.get(f"/runs/{run_id}/snapshot")).json()
        assert snapshot["data"]["side"] == steps - 1
        again = await client.post(f"/runs/{run_id}/reply", json=reply)
        assert again.status == 409
        assert (await again.json())["code"] == "gate_answered"  # a reply applies once


async def test_cancel_stops_a_running_run_at_a_committed_step(
    tmp_path: Path, actions_path: None
) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, LOOPING, {"loops": 200, "delay": 0.02})
        await wait_for(client, run_id, lambda v: v["seq"] >= 4)
        cancelled = await client.post(f"/runs/{run_id}/cancel", json={"reason": "enough"})
        assert cancelled.status == 200, await cancelled.text()
        body = await cancelled.json()
        assert body["status"] == "cancelled"
        assert {n["status"] for n in body["nodes"].values()} == {"cancelled"}
        await asyncio.sleep(0.1)
        after = await view(client, run_id)
        assert (after["seq"], after["driving"]) == (body["seq"], False)
        history = await (await client.get(f"/runs/{run_id}/history?limit=1000")).json()
        assert [r["seq"] for r in history["records"]] == list(range(body["seq"] + 1))
        assert (await client.post(f"/runs/{run_id}/cancel")).status == 409
        assert (await client.post(f"/runs/{run_id}/resume")).status == 409


async def test_shutdown_stops_at_committed_steps_and_next_server_finishes(
    tmp_path: Path, actions_path: None
) -> None:
    async with MemoryStore() as store:
        async with serving(Engine(store), settings_for(tmp_path)) as client:
            ids = [await create(client, LOOPING, {"loops": 12, "delay": 0.03}) for _ in range(3)]
            for run_id in ids:
                await wait_for(client, run_id, lambda v: v["seq"] >= 3)
        stopped = [await Engine(store).get(run_id) for run_id in ids]
        assert {state.status for state in stopped} == {"running"}
        for run_id in ids:  # every lease was released: another process could open them now
            async with Engine(store).open(run_id):
                pass
        async with serving(Engine(store), settings_for(tmp_path)) as client:
            for run_id, before in zip(ids, stopped, strict=True):
                done = await wait_for(client, run_id, lambda v: v["status"] == "completed")
                assert done["seq"] > before.seq
                snapshot = await (await client.get(f"/runs/{run_id}/snapshot")).json()
                assert snapshot["data"] == {"a": 12, "b": 12, "total": 24}


async def test_review_deadline_survives_a_restart(tmp_path: Path, actions_path: None) -> None:
    quick = GATED.replace("timeout: 1800", "timeout: 0.4")
    async with MemoryStore() as store:
        async with serving(Engine(store), settings_for(tmp_path)) as client:
            run_id = await create(client, quick, {"topic": "x"})
            await wait_for(client, run_id, lambda v: v["status"] == "waiting")
        # Down while the deadline passes: the next server must still fire `timeout`.
        await asyncio.sleep(0.5)
        assert (await Engine(store).get(run_id)).status == "waiting"
        async with serving(Engine(store), settings_for(tmp_path)) as client:
            parked = await wait_for(
                client, run_id, lambda v: v["nodes"]["spec"]["state"] == "parked"
            )
            assert parked["status"] == "waiting"
            assert parked["interrupts"][0]["deadline"] is None
            history = await (await client.get(f"/runs/{run_id}/history?limit=1000")).json()
            assert "timeout" in [r["trigger"] for r in history["records"]]
            resumed = await client.post(f"/runs/{run_id}/resume")
            assert resumed.status == 202


async def test_deadline_fires_in_a_running_server(tmp_path: Path, actions_path: None) -> None:
    quick = GATED.replace("timeout: 1800", "timeout: 0.2")
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, quick, {"topic": "x"})
        await wait_for(client, run_id, lambda v: v["nodes"]["spec"]["state"] == "parked")
        ready = await (await client.get("/readyz")).json()
        assert ready["deadlines"] == 0  # the parked gate has no deadline to arm


async def test_token_is_required_and_checked(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, token="s3cret")
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        missing = await client.get("/runs")
        assert missing.status == 401
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert missing.content_type == "application/problem+json"
        wrong = await client.get("/runs", headers={"Authorization": "Bearer guess"})
        assert wrong.status == 401
        assert (await wrong.json())["code"] == "unauthorized"
        unknown = await client.get("/nope", headers={"Authorization": "Bearer guess"})
        assert unknown.status == 401  # no route is revealed without the token
        right = await client.get("/runs", headers={"Authorization": "Bearer s3cret"})
        assert right.status == 200
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 200


async def test_errors_map_to_statuses_with_problem_bodies(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        missing = await client.get("/runs/nope")
        assert missing.status == 404
        assert (await missing.json())["code"] == "run_not_found"
        assert (await client.get("/runs/nope/events")).status == 404
        bad_json = await client.post(
            "/runs", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert bad_json.status == 400
        bad_input = await client.post("/runs", json={"graph": "hello", "input": {"who": 3}})
        assert bad_input.status == 400
        assert "input.who" in (await bad_input.json())["detail"]
        unknown_field = await client.post("/runs", json={"graph": "hello", "colour": "red"})
        assert (await unknown_field.json())["problems"] == [
            {
                "field": "body.colour",
                "message": "unknown field (known: graph, graph_yaml, input, run_id)",
            }
        ]
        path = await client.post("/runs", json={"graph": "../../etc/passwd"})
        assert path.status == 400
        assert (await path.json())["problems"][0]["field"] == "body.graph"
        created = await client.post("/runs", json={"graph": "hello", "run_id": "mine"})
        assert created.status == 201
        twice = await client.post("/runs", json={"graph": "hello", "run_id": "mine"})
        assert twice.status == 409
        bad_seq = await client.get("/runs/mine/snapshot?seq=999")
        assert bad_seq.status == 404
        bad_query = await client.get("/runs?limit=0")
        assert (await bad_query.json())["problems"][0]["field"] == "query.limit"
        bad_cursor = await client.get("/runs/mine/events", headers={"Last-Event-ID": "x"})
        assert bad_cursor.status == 400
        beyond = await client.get("/runs/mine/events", headers={"Last-Event-ID": "999-0"})
        assert beyond.status == 400


async def test_the_server_guide_http_session_works_as_shown(tmp_path: Path) -> None:
    page = (REPO / "docs" / "guides" / "server-and-viewer.md").read_text(encoding="utf-8")
    section = page.split("## HTTP API", 1)[1]
    graph_yaml = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    settings = settings_for(
        tmp_path, token="s3cret", allow_python_modules=frozenset({"phasegraph.graphs.hello"})
    )
    auth = {"Authorization": "Bearer s3cret"}
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        body = {"graph_yaml": graph_yaml, "input": {"who": "ada"}}
        created = await client.post("/runs", json=body, headers=auth)
        assert created.status == 201, await created.text()
        run_id = (await created.json())["run_id"]
        async with client.get(f"/runs/{run_id}/events", headers=auth) as stream:
            shown = await sse(stream, until=lambda evs: evs[-1]["kind"] == "run_waiting")
        assert [(e["id"], e["kind"]) for e in shown[-2:]] == [
            ("4-0", "review_request"),
            ("4-1", "run_waiting"),
        ]
        assert shown[-2]["fields"]["payload"] == {"greeting": "hello, ada"}
        reply = {"interrupt_id": f"{run_id}:review:run", "trigger": "ok"}
        assert (await client.post(f"/runs/{run_id}/reply", json=reply, headers=auth)).status == 200
        headers = {**auth, "Last-Event-ID": "4-1"}
        async with client.get(f"/runs/{run_id}/events", headers=headers) as stream:
            rest = await sse(stream)
        assert rest[0]["id"] == "5-0"
        assert rest[-1]["kind"] == "run_completed"
        snapshot = await (await client.get(f"/runs/{run_id}/snapshot", headers=auth)).json()
        assert snapshot["data"] == {"greeting": "hello, ada", "letters": 8}


def test_serve_refuses_a_public_address_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHASEGRAPH_TOKEN", raising=False)
    collector = gc.get_threshold(), gc.get_freeze_count()
    argv = ["serve", "--store", "memory://", "--host", "0.0.0.0", "--port", "0"]
    assert cli.main(argv) == 2
    assert "needs a bearer token" in capsys.readouterr().err
    # A serve that never started leaves the process's collector as it found it.
    assert (gc.get_threshold(), gc.get_freeze_count()) == collector
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--max-runs", "0"])
    assert exited.value.code == 2


async def test_shutdown_ends_open_event_streams_promptly(
    tmp_path: Path, actions_path: None
) -> None:
    async with MemoryStore() as store:
        server = TestServer(create_app(Engine(store), settings=settings_for(tmp_path)))
        # aiohttp waits this long for handlers still at work before it cancels them.
        await server.start_server(shutdown_timeout=3600)
        async with TestClient(server) as client:
            run_id = await create(client, GATED, {"topic": "t"})
            async with client.get(f"/runs/{run_id}/events") as stream:
                await sse(stream, until=lambda evs: evs[-1]["kind"] == "run_waiting")
                # What SIGTERM does: the app shuts down, its streams ended rather than
                # waited for (an hour); the bound is a failure guard, not a speed limit.
                async with asyncio.timeout(60):
                    await server.close()
                assert await sse(stream) == []  # the stream ended: no hanging handler
        assert (await Engine(store).get(run_id)).status == "waiting"
