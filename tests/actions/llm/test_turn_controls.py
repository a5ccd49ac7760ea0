"""``tool_choice``, ``parallel_tool_calls`` and ``response_format`` on ``llm:`` bindings.

The real ``openai`` client sends them to :class:`ScriptedModelServer` over a loopback
socket; the scripted model answers whatever its script says, as a server that takes the
controls as a wish would, so the answers' check is exercised too.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from builders import cli_argv
from model_kit import agent_node, call, graph_text, run_agent
from phasegraph.model import NodeOutcome, RunStatus

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"enum": ["pass", "fail"]}, "why": {"type": "string"}},
    "required": ["verdict", "why"],
    "additionalProperties": False,
}


def _thinks(history):
    return [r for r in history if r.source == ("think",) and r.kind == "transition"]


async def test_tool_choice_required_is_sent_recorded_and_enforced(serve, tmp_path: Path) -> None:
    server = await serve(
        [
            {"content": "I think the notes say hello."},  # prose, although a call is required
            {"tool_calls": [call("read_file", path="notes.txt")]},
            {"content": "They say hi."},
        ]
    )
    (tmp_path / "notes.txt").write_text("hi", encoding="utf-8")
    llm = {"tool_choice": "required", "parallel_tool_calls": False}
    node = agent_node(llm, settings={"workspace": str(tmp_path)})
    # The second think has no tools to call: `required` only where tools are offered.
    node["bind"]["think"]["llm"]["tool_choice"] = "required"
    state, history = await run_agent(graph_text(node))

    first = server.requests[0]
    assert first["tool_choice"] == "required"
    assert first["parallel_tool_calls"] is False
    # The prose answer was shown to the model with why; it called the tool on the retry.
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I think the notes say hello."}
    assert retry[-1]["role"] == "user"
    assert "must call one of the tools" in retry[-1]["content"]
    think = _thinks(history)[0]
    assert think.trigger == "tool_calls"
    output = think.result["output"]
    assert output["tool_choice"] == "required"
    assert output["parallel_tool_calls"] is False
    assert output["refused_answers"] == [retry[-1]["content"]]
    # Both answers' tokens are counted.
    assert output["usage"]["total_tokens"] > 0
    # The refused answer and why stay in the conversation: the agent's history is whole.
    assert "must call one of the tools" in state.data["conversation"][2]["content"]


async def test_a_named_tool_choice_is_sent_as_the_function_to_call(serve, tmp_path: Path) -> None:
    server = await serve(
        [{"tool_calls": [call("write_file", path="a", text="x")]}, {"content": "done"}]
    )
    node = agent_node({"tool_choice": "write_file"}, settings={"workspace": str(tmp_path)})
    state, history = await run_agent(graph_text(node))
    assert server.requests[0]["tool_choice"] == {
        "type": "function",
        "function": {"name": "write_file"},
    }
    assert (tmp_path / "a").read_text(encoding="utf-8") == "x"
    # Every turn of this binding must call it: the text answer is refused, and with no
    # answer left in the script the node fails (a binding forces a tool on every turn).
    assert _thinks(history)[0].trigger == "tool_calls"
    assert "must call the tool 'write_file'" in server.requests[2]["messages"][-1]["content"]
    assert state.status is RunStatus.FAILED


async def test_a_structured_answer_is_validated_and_refusals_are_kept(serve) -> None:
    server = await serve(
        [
            {"content": '{"verdict": "maybe"}'},
            {"content": '{"verdict": "pass", "why": "it works"}'},
        ]
    )
    llm = {"tools": [], "response_format": {"schema": SCHEMA, "name": "review"}}
    state, history = await run_agent(graph_text(agent_node(llm)))

    sent = server.requests[0]["response_format"]
    assert sent == {
        "type": "json_schema",
        "json_schema": {"name": "review", "schema": SCHEMA, "strict": True},
    }
    told = server.requests[1]["messages"][-1]["content"]
    assert "does not match the schema 'review'" in told
    assert "'maybe' is not one of ['pass', 'fail']" in told
    [think] = _thinks(history)
    assert think.result["payload"]["structured"] == {"verdict": "pass", "why": "it works"}
    assert think.result["output"]["response_format"] == "review"
    assert state.status is RunStatus.COMPLETED

    server = await serve([{"refusal": "I cannot judge this."}])
    state, history = await run_agent(graph_text(agent_node(llm)))
    [think] = _thinks(history)
    assert think.result["payload"]["refusal"] == "I cannot judge this."
    assert state.data["conversation"][-1]["refusal"] == "I cannot judge this."
    assert server.request_count == 1  # a refusal is the model's answer: not asked again


async def test_an_answer_that_never_complies_fails_the_node_saying_why(serve) -> None:
    await serve([{"content": "not json"}, {"content": "still not json"}])
    llm = {"tools": [], "response_format": {"schema": SCHEMA, "attempts": 2}}
    state, history = await run_agent(graph_text(agent_node(llm)))
    assert state.nodes["agent"].outcome is NodeOutcome.FAILED
    [failed] = [r for r in history if r.trigger == "error"]
    message = failed.result["payload"]["message"]
    assert "answered 2 times without complying" in message
    assert "is not JSON" in message


def test_check_refuses_controls_that_cannot_hold(tmp_path: Path) -> None:
    bad = [
        ({"tool_choice": "delete_everything"}, "neither auto, none nor required"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice 'required' needs tools"),
        ({"tools": [], "parallel_tool_calls": True}, "parallel_tool_calls needs tools"),
        ({"response_format": {"schema": {"type": "objekt"}}}, "not a valid JSON Schema"),
    ]
    for llm, said in bad:
        path = tmp_path / "graph.yaml"
        path.write_text(_yaml(agent_node(llm)), encoding="utf-8")
        checked = subprocess.run(
            cli_argv("check", str(path)), capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 1, checked.stdout
        assert said in checked.stdout, checked.stdout
        assert "Traceback" not in checked.stderr
    path.write_text(_yaml(agent_node({"tool_choice": "read_file"})), encoding="utf-8")
    checked = subprocess.run(cli_argv("check", str(path)), capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _yaml(node) -> str:
    return yaml.safe_dump(json.loads(graph_text(node)), sort_keys=False)
