"""Hostile bytes over a real socket: a 4xx that says what is wrong, never a 5xx or a traceback."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_server import serving, settings_for

from builders import REPO, cli_argv, sqlite_db
from phasegraph import Engine
from phasegraph.store import open_store
from phasegraph.store.memory import MemoryStore

TOKEN = "s3cret"


async def raw_status(port: int, request: bytes) -> int:
    """Send ``request`` as is (aiohttp's client would refuse these bytes) and read the status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        status_line = await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer \xe9\xff", b"Bearer \xed\xa0\x80", b"\x80"],
)
async def test_non_ascii_authorization_is_401(tmp_path: Path, authorization: bytes) -> None:
    settings = settings_for(tmp_path, token=TOKEN)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        port = client.server.port
        assert port is not None
        request = (
            b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: %s\r\n"
            b"Connection: close\r\n\r\n" % (port, authorization)
        )
        assert await raw_status(port, request) == 401
        good = await client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert good.status == 200


@pytest.mark.parametrize(
    ("graph_yaml", "location", "words"),
    [
        ("nodes: []\ndescription: a\x07b\n", "graph_yaml:2:15", "U+0007"),
        ("nodes: []\ndescription: a\ud800b\n", "graph_yaml:2:15", "U+D800"),
        ('nodes: []\ndescription: "a \\ud800 b"\n', "graph_yaml:2:14", "\\ud800"),
    ],
)
async def test_uploaded_text_yaml_cannot_hold_is_400_at_its_line(
    tmp_path: Path, graph_yaml: str, location: str, words: str
) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        response = await client.post("/runs", json={"graph_yaml": graph_yaml})
        assert response.status == 400, await response.text()
        body = await response.json()
        assert body["code"] == "spec_invalid"
        (problem,) = body["problems"]
        assert problem["location"] == location
        assert words in problem["message"]


async def test_an_integral_float_is_a_step_number(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        created = await client.post("/runs", json={"graph": "hello", "run_id": "src"})
        assert created.status == 201
        forked = await client.post("/runs/src/fork", json={"at_seq": 0.0})
        assert forked.status == 201, await forked.text()
        refused = await client.post("/runs/src/fork", json={"at_seq": 0.5})
        assert refused.status == 400


def test_a_request_that_is_not_http_is_one_log_line(tmp_path: Path) -> None:
    with subprocess.Popen(
        cli_argv("serve", "--port", "0", "--store", "memory://", "-q"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        assert server.stdout is not None
        port = int(server.stdout.readline().strip().rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Probe: \x00\r\n\r\n")
            assert client.recv(100).split()[1] == b"400"
        server.send_signal(signal.SIGINT)
        _, errors = server.communicate(timeout=60)
    assert server.returncode == 0
    assert "Traceback" not in errors
    assert errors.splitlines() == [
        "refused a request from 127.0.0.1 that is not valid HTTP: "
        "Invalid header value char: b'X-Probe: \\x00'"
    ]


async def test_get_runs_answers_with_the_unreadable_run_marked(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "specs" / "openapi.yaml").read_text(encoding="utf-8"))
    run_list = {"$ref": "#/components/schemas/RunList", "components": spec["components"]}
    path = tmp_path / "runs.db"
    async with open_store(f"sqlite:///{path}") as store:
        engine = Engine(store)
        for run_id in ("first", "broken"):
            await engine.run("hello", run_id=run_id)
        with sqlite_db(path) as damage:
            damage.execute("UPDATE runs SET status = 'lost' WHERE run_id = 'broken'")
        async with serving(engine, settings_for(tmp_path)) as client:
            response = await client.get("/runs")
            assert response.status == 200, await response.text()
            body = await response.json()
    jsonschema.Draft202012Validator(run_list).validate(body)
    unreadable = {run["run_id"]: run.get("unreadable") for run in body["runs"]}
    assert unreadable["first"] is None
    assert "status is 'lost', not a run status" in unreadable["broken"]
