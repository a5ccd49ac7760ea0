"""The tutorial's agent traced into Arize Phoenix, the receiver its users run.

The test starts ``phoenix serve`` (from its own virtualenv, ``.venv-phoenix``, which
``.ci/run`` makes; ``PHASEGRAPH_TEST_PHOENIX`` names another ``phoenix``) on free loopback
ports, runs the tutorial's agent with the real command line and content capture on,
answers its gate from another process, and reads back from Phoenix's own API what its
trace view shows: one trace, the prompt, the completion, a tool call's arguments and
result. Without Phoenix the test skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_tracing_content import cli, tutorial_files

from builders import REPO
from model_kit import ENDPOINT_VARIABLES
from phasegraph.run._tracing import run_root

PHOENIX = os.environ.get("PHASEGRAPH_TEST_PHOENIX", str(REPO / ".venv-phoenix" / "bin" / "phoenix"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """``phoenix serve`` on free loopback ports, with a working folder of its own: its URL."""
    if not Path(PHOENIX).exists():
        reason = (
            f"no Phoenix at {PHOENIX} (python3 -m venv .venv-phoenix && "
            ".venv-phoenix/bin/pip install -e '.[phoenix]')"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must run it (see .ci/run)")
        pytest.skip(reason)
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
    }
    log = (tmp_path / "phoenix.log").open("w")
    with subprocess.Popen(
        [PHOENIX, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    ) as server:
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(1200):  # a guard for a server that never starts, not a speed limit
                assert server.poll() is None, (tmp_path / "phoenix.log").read_text()
                try:
                    _get(f"{url}/v1/projects")
                    break
                except OSError:
                    time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()


def _spans(url: str, expected: int) -> list[dict[str, Any]]:
    """The default project's spans, once Phoenix has stored ``expected`` of them."""
    for _ in range(600):  # ingestion is asynchronous: a guard, not a speed limit
        spans: list[dict[str, Any]] = _get(f"{url}/v1/projects/default/spans?limit=1000")["data"]
        if len(spans) >= expected:
            return spans
        time.sleep(0.1)
    raise AssertionError(f"Phoenix stored {len(spans)} spans, not {expected}")


async def test_phoenix_shows_the_tutorial_agent_as_one_trace_with_its_content(
    phoenix: str, tmp_path: Path
) -> None:
    tutorial_files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix, "OTEL_SERVICE_NAME": "tutorial"}
    common = ["--store", f"sqlite:///{tmp_path / 'runs.db'}", "--otel", "--otel-content"]
    run = ["run", "notes.yaml", "--input", "topic=phasegraph", "--run-id", "notes-1"]
    code, out = await cli(tmp_path, env, *run, *common)
    assert code == 3, out
    reply = ["reply", "notes-1", "--id", "notes-1:review:run", "--trigger", "ok"]
    code, out = await cli(tmp_path, env, *reply, *common)
    assert code == 0, out
    # Both processes flushed their spans as they exited: 36 for this run, as sent.
    spans = await asyncio.to_thread(_spans, phoenix, 36)

    assert {span["context"]["trace_id"] for span in spans} == {
        f"{run_root('notes-1').trace_id:032x}"
    }
    drives = [span for span in spans if span["name"] == "phasegraph.run"]
    [root] = [span for span in drives if span["parent_id"] is None]
    [later] = [span for span in drives if span["parent_id"] is not None]
    assert later["parent_id"] == root["context"]["span_id"]

    # What Phoenix's LLM panel shows for the writer's first turn.
    chats = sorted((s for s in spans if s["name"] == "chat writer"), key=lambda s: s["start_time"])
    first = chats[0]["attributes"]
    assert json.loads(first["gen_ai.input.messages"])[0]["parts"][0]["content"] == (
        "Write three bullet points about phasegraph to notes.md."
    )
    assert "You write short notes" in first["gen_ai.system_instructions"]
    called = json.loads(first["gen_ai.output.messages"])[0]["parts"][0]
    assert (called["type"], called["name"]) == ("tool_call", "write_file")
    said = json.loads(chats[1]["attributes"]["gen_ai.output.messages"])[0]["parts"]
    assert said == [{"type": "text", "content": "I wrote notes.md."}]
    # And its tool panel: the call's arguments and its result.
    writes = sorted(
        (s for s in spans if s["name"] == "execute_tool write_file"), key=lambda s: s["start_time"]
    )
    tool = writes[0]["attributes"]
    assert json.loads(tool["gen_ai.tool.call.arguments"])["text"] == "- durable\n- explicit\n"
    assert json.loads(tool["gen_ai.tool.call.result"])["path"] == "notes.md"
