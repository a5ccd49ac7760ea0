"""Cassettes keep no secret, and answer ``http:`` and ``shell:`` actions offline.

A graph calls a real HTTP server with a header from the environment (a variable not
named like a secret: the binding names it) and echoes its input (a secret-named
variable's value) through a command; the cassette holds neither value, and the graph
passes against it after the server has stopped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import yaml
from aiohttp import web

from builders import cli_argv
from phasegraph.testing.cassettes import check_cassette

HEADER_SECRET = "header-secret-value-777"
INPUT_SECRET = "input-secret-value-888"

GRAPH = """\
graph: secrets_demo
nodes:
  - id: fetch
    machine: task
    writes: [reply]
    bind:
      run:
        http:
          url: "http://127.0.0.1:{port}/echo"
          headers_from_env: {{Authorization: "Bearer {{SERVICE_AUTH}}"}}
        capture: reply
  - id: say
    machine: task
    needs: [fetch]
    writes: [said]
    bind:
      run:
        shell: ["printf", "%s", "{{note}}"]
        capture: said
        timeout: 10
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PHASEGRAPH_LLM")},
        "SERVICE_AUTH": HEADER_SECRET,
        "MY_API_KEY": INPUT_SECRET,
    }
    return subprocess.run(
        cli_argv(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


async def test_no_secret_reaches_a_cassette_and_http_and_shell_are_answered_offline(
    tmp_path: Path,
) -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"seen": request.headers.get("Authorization", "")})

    app = web.Application()
    app.router.add_get("/echo", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    graph = tmp_path / "secrets.yaml"
    graph.write_text(GRAPH.format(port=port), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    try:
        ran = await asyncio.to_thread(
            _cli, "run", str(graph), "--store", store, "--run-id", "s", "-q",
            "--input", f"note={INPUT_SECRET}", cwd=tmp_path,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
    finally:
        await runner.cleanup()  # from here on, nothing answers on that port
    cassette = tmp_path / "secrets.cassette.yaml"
    written = await asyncio.to_thread(
        _cli, "record", "s", "--store", store, "--out", str(cassette), cwd=tmp_path
    )
    assert written.returncode == 0, written.stdout + written.stderr
    text = cassette.read_text(encoding="utf-8")
    assert HEADER_SECRET not in text
    assert INPUT_SECRET not in text
    entries = yaml.safe_load(text)["entries"]
    fetched = next(e for e in entries if e["node"] == "fetch")
    assert fetched["kind"] == "http"
    assert fetched["answer"]["data"]["reply"] == {"seen": "Bearer ***"}
    said = next(e for e in entries if e["node"] == "say")
    assert (said["kind"], said["answer"]["data"]["said"]) == ("shell", "***")
    assert yaml.safe_load(text)["input"] == {"note": "***"}
    # The server is gone: the http result can only come from the cassette.
    played = await asyncio.to_thread(
        _cli, "test", str(graph), "--cassette", str(cassette), cwd=tmp_path
    )
    assert played.returncode == 0, played.stdout + played.stderr
    assert "passed (2 of 2 entries)" in played.stdout
    # In Python, the cassette names its graph: the file beside it.
    report = await asyncio.to_thread(check_cassette, cassette)
    assert (report.passed, report.graph, report.entries) == (True, "secrets_demo", 2)
