"""The tutorial's agent traced with its content, in one trace across a gate and two processes.

The real command line (``run``, then ``reply`` in another process) exports over OTLP/HTTP
to the receiver of ``otlp_kit``, a real HTTP server on a loopback port that decodes the
protobuf bodies; the test reads back the prompt, the completion, a tool call's arguments
and its result, as the OpenTelemetry GenAI conventions name them. The same two commands
export to Arize Phoenix, the receiver users run, in ``test_tracing_phoenix.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

from builders import REPO, cli_argv
from model_kit import ENDPOINT_VARIABLES
from otlp_kit import ReceivedSpan, otlp_receiver
from phasegraph.run._tracing import run_root

SECRET = "s3cret-topic-value"
"""An environment secret the run's prompt contains: the traces must mask it."""


def tutorial_files(folder: Path) -> None:
    """The files the tutorial's agent page writes, as it shows them."""
    page = (REPO / "docs" / "tutorial" / "agent.md").read_text(encoding="utf-8")
    for name, text in re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", page, re.S):
        (folder / name).write_text(text, encoding="utf-8")


async def cli(folder: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *cli_argv(*args),
        cwd=folder,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, out.decode()


def _messages(span: ReceivedSpan, key: str) -> list[dict]:
    return json.loads(span.attributes[key])


async def test_the_tutorial_agent_is_one_trace_with_its_content(tmp_path: Path) -> None:
    tutorial_files(tmp_path)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
    env |= {"NOTES_API_KEY": SECRET, "OTEL_SERVICE_NAME": "tutorial"}
    async with otlp_receiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        common = ["--store", store, "--otel"]
        code, out = await cli(
            tmp_path,
            {**env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
            *["run", "notes.yaml", "--input", f"topic={SECRET}", "--run-id", "notes-1"],
            *common,
        )
        assert code == 3, out  # waiting at the review gate; its spans are flushed at exit
        first = list(receiver.spans)
        code, out = await cli(
            tmp_path,
            env,
            *["reply", "notes-1", "--id", "notes-1:review:run", "--trigger", "ok"],
            *common,
            "--otel-content",
        )
        assert code == 0, out
        spans = list(receiver.spans)

    # One trace: the run's own, across the wait and the second process.
    root = run_root("notes-1")
    assert {span.trace_id for span in spans} == {f"{root.trace_id:032x}"}
    drives = sorted((s for s in spans if s.name == "phasegraph.run"), key=lambda s: s.start)
    assert len(drives) == 2
    assert drives[0] in first
    assert (drives[0].parent_id, drives[0].span_id) == ("", f"{root.span_id:016x}")
    assert drives[1].parent_id == drives[0].span_id  # the reply's drive, under the run's root
    assert drives[1].attributes["phasegraph.run.resumed"] is True
    assert any(span.name == "node review" for span in spans if span not in first)

    # Span names say the node and the hook.
    names = {span.name for span in spans}
    assert {"write think", "write act", "write verify", "write reflect"} <= names
    assert {"node write", "node summary", "node review"} <= names

    # The model's first turn: system instructions, the rendered prompt, the completion.
    chats = sorted((s for s in spans if s.name == "chat writer"), key=lambda s: s.start)
    system = _messages(chats[0], "gen_ai.system_instructions")
    assert system == [
        {"type": "text", "content": "You write short notes in Markdown files, through your tools."}
    ]
    [prompt] = _messages(chats[0], "gen_ai.input.messages")
    assert prompt == {
        "role": "user",
        "parts": [{"type": "text", "content": "Write three bullet points about *** to notes.md."}],
    }
    [called] = _messages(chats[0], "gen_ai.output.messages")
    assert called["finish_reason"] == "tool_calls"
    assert called["parts"][0]["name"] == "write_file"
    [answered] = _messages(chats[1], "gen_ai.output.messages")
    assert answered["parts"] == [{"type": "text", "content": "I wrote notes.md."}]

    # A tool call's arguments and its result.
    writes = sorted(
        (s for s in spans if s.name == "execute_tool write_file"), key=lambda s: s.start
    )
    arguments = json.loads(writes[0].attributes["gen_ai.tool.call.arguments"])
    assert arguments == {"path": "notes.md", "text": "- durable\n- explicit\n"}
    result = json.loads(writes[0].attributes["gen_ai.tool.call.result"])
    assert result["path"] == "notes.md"
    [read] = [s for s in spans if s.name == "execute_tool read_file"][:1]
    assert "replayable" in read.attributes["gen_ai.tool.call.result"]

    # The check's step: its command, exit status and the end of its stderr.
    failed = next(
        s for s in spans if s.name == "write verify" and s.attributes.get("process.exit.code") == 1
    )
    assert failed.attributes["process.command_args"] == ["python3", "check_notes.py"]
    assert failed.attributes["phasegraph.stderr"] == "notes.md has 2 bullet points, not 3\n"

    # The secret in the prompt never left the process.
    assert not any(SECRET in json.dumps(dict(span.attributes)) for span in spans)
