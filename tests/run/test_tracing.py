"""OpenTelemetry traces of agent runs, read back from a real OTLP/HTTP receiver.

The agent runs its real ``llm:`` and ``tools:`` actions against the scripted model over
a loopback socket; the spans go out through the real OTLP/HTTP exporter to the
receiver of ``otlp_kit``, which decodes the protobuf bodies.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from builders import cli_argv
from model_kit import ENDPOINT_VARIABLES, agent_node, call, graph_text
from otlp_kit import ReceivedSpan, otlp_receiver
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.run._tracing import run_root
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store
from phasegraph.testing import ScriptedModelServer

CLIENT_KIND = 3  # SPAN_KIND_CLIENT in the OTLP protobuf
ERROR_STATUS = 2  # STATUS_CODE_ERROR

SCRIPT = [
    {
        "tool_calls": [call("read_file", path="notes.txt")],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5},
    },
    {"content": "The answer is forty-two.", "usage": {"prompt_tokens": 41, "completion_tokens": 7}},
]


@pytest.fixture
async def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The scripted model's base URL, and a graph file of one agent node beside notes."""
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "notes.txt").write_text("forty-two", encoding="utf-8")
    node = agent_node(settings={"workspace": str(tmp_path)})
    (tmp_path / "agent.yaml").write_text(graph_text(node), encoding="utf-8")
    async with ScriptedModelServer(SCRIPT) as server:
        monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", server.base_url)
        yield server.base_url


def _by_start(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return sorted(spans, key=lambda span: span.start)


async def test_an_agent_run_is_traced_from_run_to_model_and_tool_calls(
    model: str, tmp_path: Path
) -> None:
    async with otlp_receiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")
        provider = TracerProvider(
            resource=Resource.create({"service.name": "traced-test"}), shutdown_on_exit=False
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        definition = load_graph_text((tmp_path / "agent.yaml").read_text(), name="agent.yaml")
        async with open_store("memory://") as store:
            engine = Engine(store, tracer_provider=provider)
            state = await engine.run(definition, {"task": "What do the notes say?"})
        # The exporter posts from its own thread to the receiver in this loop.
        await asyncio.to_thread(provider.shutdown)

    assert state.status is RunStatus.COMPLETED
    [run] = receiver.named("phasegraph.run")
    # With a provider of the caller's own, the run's root is the parent every drive names:
    # its ids are the run's own.
    root = run_root(state.run_id)
    assert run.parent_id == f"{root.span_id:016x}"
    assert run.trace_id == f"{root.trace_id:032x}"
    assert run.service == "traced-test"
    assert run.attributes["phasegraph.run.id"] == state.run_id
    assert run.attributes["phasegraph.run.status"] == "completed"
    [node] = receiver.named("node agent")
    assert node.parent_id == run.span_id
    assert node.attributes["phasegraph.node.id"] == "agent"
    assert node.attributes["phasegraph.node.status"] == "completed"
    transitions = [fields["trigger"] for name, fields in node.events if name == "transition"]
    assert transitions == ["tool_calls", "observed", "answer"]

    # One step span per action call, under the node: think (llm), act (tools), think.
    steps = _by_start([s for s in receiver.spans if s.name in ("agent think", "agent act")])
    assert [step.name for step in steps] == ["agent think", "agent act", "agent think"]
    assert [step.attributes["phasegraph.hook"] for step in steps] == ["think", "act", "think"]
    assert [step.attributes["phasegraph.trigger"] for step in steps] == [
        "tool_calls",
        "observed",
        "answer",
    ]
    assert {step.parent_id for step in steps} == {node.span_id}

    # A model-call span under each think step, with the GenAI attributes.
    chats = _by_start(receiver.named("chat main"))
    assert [chat.parent_id for chat in chats] == [steps[0].span_id, steps[2].span_id]
    assert {chat.kind for chat in chats} == {CLIENT_KIND}
    first, second = (chat.attributes for chat in chats)
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.system"] == "openai"
    assert first["gen_ai.request.model"] == "main"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (30, 5)
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"]) == (41, 7)
    assert second["gen_ai.response.finish_reasons"] == ["stop"]

    # The tool call, under the act step, named with the model's call id.
    [tool] = receiver.named("execute_tool read_file")
    assert tool.parent_id == steps[1].span_id
    assert tool.attributes["gen_ai.tool.name"] == "read_file"
    call_id = state.data["conversation"][1]["tool_calls"][0]["id"]
    assert call_id
    assert tool.attributes["gen_ai.tool.call.id"] == call_id
    assert tool.status_code != ERROR_STATUS
    assert {span.trace_id for span in receiver.spans} == {run.trace_id}


async def _cli(*args: str, env: Mapping[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _run_args(tmp_path: Path) -> list[str]:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    return ["run", "agent.yaml", "--input", "task=read the notes", "--store", store, "--json"]


@pytest.mark.parametrize(
    ("switch", "env"), [(["--otel"], {}), ([], {"PHASEGRAPH_OTEL": "1"})], ids=["flag", "env"]
)
async def test_the_cli_exports_traces_to_the_standard_endpoint(
    model: str, tmp_path: Path, switch: list[str], env: dict[str, str]
) -> None:
    async with otlp_receiver() as receiver:
        variables = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": ""}
        argv = cli_argv(*_run_args(tmp_path), *switch)
        code, out, err = await _cli(*argv, env=variables, cwd=tmp_path)
        assert code == 0, err
        # Batched spans are flushed as the command exits, before it returns.
        spans = list(receiver.spans)

    assert json.loads(out)["status"] == "completed"
    ours = [span for span in spans if "phasegraph.run.id" in span.attributes]
    names = {"phasegraph.run", "node agent", "agent think", "agent act"}
    assert {span.name for span in ours} == names
    run_id = json.loads(out)["run_id"]
    assert {span.attributes["phasegraph.run.id"] for span in ours} == {run_id}
    [run] = [span for span in spans if span.name == "phasegraph.run"]
    assert run.service == "phasegraph"
    # The CLI's provider sends the run's root itself, with the run's own ids.
    assert (run.parent_id, run.span_id) == ("", f"{run_root(run_id).span_id:016x}")
    assert {span.trace_id for span in spans} == {f"{run_root(run_id).trace_id:032x}"}
    # Content is off by default: no message, argument or result is sent.
    assert not any(
        key.startswith(
            (
                "gen_ai.input",
                "gen_ai.output",
                "gen_ai.tool.call.a",
                "gen_ai.tool.call.r",
                "gen_ai.system_",
            )
        )
        for span in spans
        for key in span.attributes
    )
    chats = [span for span in spans if span.name == "chat main"]
    assert sorted(chat.attributes["gen_ai.usage.output_tokens"] for chat in chats) == [5, 7]
    [tool] = [span for span in spans if span.name == "execute_tool read_file"]
    assert tool.attributes["gen_ai.tool.call.id"]


_WITHOUT_TRACING = """
import sys
from phasegraph.cli._main import main
code = main(sys.argv[1:])
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
print("opentelemetry modules:", loaded, file=sys.stderr)
raise SystemExit(code)
"""


async def test_with_tracing_off_nothing_is_exported_and_opentelemetry_is_not_imported(
    model: str, tmp_path: Path
) -> None:
    async with otlp_receiver() as receiver:
        argv = [sys.executable, "-c", _WITHOUT_TRACING, *_run_args(tmp_path)]
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "PHASEGRAPH_OTEL": "0"}
        code, out, err = await _cli(*argv, env=env, cwd=tmp_path)
        assert code == 0, err
        received = receiver.requests

    assert json.loads(out)["status"] == "completed"  # the agent called its tool and answered
    assert "opentelemetry modules: []" in err
    assert received == 0


_WITHOUT_THE_EXTRA = """
import sys
for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.sdk"):
    sys.modules[name] = None  # as if the otel extra were not installed
from phasegraph.cli._main import main
raise SystemExit(main(sys.argv[1:]))
"""


async def test_otel_without_the_extra_says_what_to_install(model: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", _WITHOUT_THE_EXTRA, *_run_args(tmp_path), "--otel"]
    code, _, err = await _cli(*argv, env={}, cwd=tmp_path)

    assert code == 2, err
    # phasegraph is on no package index: the packages themselves, and the checkout's way.
    assert "pip install 'opentelemetry-api<2,>=1.27' 'opentelemetry-sdk<2,>=1.27'" in err
    assert "from a checkout: pip install -e '.[otel]'" in err
    assert "phasegraph[otel]" not in err
    assert "Traceback" not in err
