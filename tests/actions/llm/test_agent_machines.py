"""The built-in model machines check clean, and check knows actions spend `tokens`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from builders import REPO, TESTS
from model_kit import agent_node, graph_text, run_agent
from phasegraph.analysis import Severity, check
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.store import open_store

FIXTURES = TESTS / "fixtures" / "agents"

MODEL_MACHINES = ["agent", "agent_quality_loop", "solo_agent", "guarded_agent"]


@pytest.mark.parametrize("name", MODEL_MACHINES)
def test_the_model_machines_check_without_findings(name: str) -> None:
    report = check(name)
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []


def test_a_budget_only_actions_spend_can_run_out_at_any_step(tmp_path: Path) -> None:
    # Without this, check would call the gave_up transitions dead: no state spends tokens.
    text = (REPO / "states" / "agent.yaml").read_text(encoding="utf-8")
    path = tmp_path / "my_agent.yaml"
    path.write_text(text.replace("machine: agent", "machine: my_agent"), encoding="utf-8")
    assert [f.message for f in check(path).findings] == []
    # Drop the way out when tokens run out after a tool call: check finds the gap.
    stuck = text.replace("machine: agent", "machine: my_agent").replace(
        "  - {trigger: observed, source: act, dest: gave_up}\n", ""
    )
    path.write_text(stuck, encoding="utf-8")
    [finding] = check(path).findings
    assert finding.code == "guard-gap"
    assert "trigger 'observed' in state 'act' is refused" in finding.message
    assert "tokens spent" in finding.message


async def test_guarded_agent_recovers_from_a_provider_failure(serve) -> None:
    server = await serve([{"error": 503, "message": "overloaded"}, {"content": "done now"}])
    node = agent_node({"tools": [], "retries": 0}, machine="guarded_agent")
    node["bind"]["recover"] = {"python": "phasegraph.concerns.fallback:recover"}
    node["bind"]["emergency"] = {"python": "phasegraph.concerns.fallback:emergency"}
    state, history = await run_agent(graph_text(node))
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["agent"].path == ("recovered",)
    [failed] = [r for r in history if r.trigger == "error"]
    assert failed.result["payload"]["error_code"] == "llm_failure"
    assert "overloaded" in failed.result["payload"]["message"]
    assert state.data["conversation"][-1]["content"] == "done now"
    assert server.request_count == 2


async def test_agent_quality_loop_reflects_with_the_model_then_passes(serve) -> None:
    server = await serve(
        [
            {"content": "draft"},
            {"content": "The draft missed the point; I will be precise."},
            {"content": "precise answer"},
        ]
    )
    node = agent_node({"tools": []}, machine="agent_quality_loop")
    node["bind"]["verify"] = {
        "python": "quality_checks:verify_precise",
        "triggers": ["pass", "fail"],
    }
    node["bind"]["reflect"] = {
        "llm": {"model": "main", "prompt": "It failed: {payload[message]}. Why?"},
        "on_outcome": {"answer": "retry", "compressed": None},
    }
    state, _ = await run_agent(graph_text(node), path=FIXTURES / "quality.yaml")
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["agent"].path == ("completed",)
    reflect_request = server.requests[1]["messages"]
    assert reflect_request[-1] == {"role": "user", "content": "It failed: not precise. Why?"}
    assert server.request_count == 3


MY_LOOP = """
machine: my_loop
initial: ask
budgets:
  rounds: {limit: 5, spend_on: [ask]}
states:
  ask: {hook: think}
  run: {hook: act}
  finished: {final: success}
  stopped: {final: gave_up}
transitions:
  - {trigger: tool_calls, source: ask, dest: run}
  - {trigger: answer, source: ask, dest: finished}
  - {trigger: compressed, source: ask, dest: ask}
  - {trigger: compressed, source: ask, dest: stopped}
  - {trigger: observed, source: run, dest: ask}
  - {trigger: observed, source: run, dest: stopped}
"""


async def test_a_machine_without_advance_binds_tools_with_advance_off(
    serve, tmp_path: Path
) -> None:
    (tmp_path / "my_loop.yaml").write_text(MY_LOOP, encoding="utf-8")
    node = agent_node({"tools": ["advance"]}, machine="my_loop")
    node["bind"]["act"] = {"tools": "conversation", "on_outcome": {"advance": None}}
    graph = tmp_path / "g.yaml"

    def write() -> None:
        document = json.loads(graph_text(node, machines=["my_loop.yaml"]))
        graph.write_text(yaml.safe_dump(document), encoding="utf-8")

    write()
    assert [f.message for f in check(graph).findings] == []
    # Without advance: null, check says the act state does not take `advance`.
    del node["bind"]["act"]["on_outcome"]
    write()
    assert any("'advance'" in f.message for f in check(graph).findings)

    node["bind"]["act"]["on_outcome"] = {"advance": None}
    write()
    server = await serve(
        [{"tool_calls": [{"name": "advance", "arguments": {}}]}, {"content": "ok"}]
    )
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(graph, {"task": "go"})
        history = await engine.history(state.run_id)
    assert state.status is RunStatus.COMPLETED
    assert [r.trigger for r in history if r.source == ("run",) and r.kind == "transition"] == [
        "observed"
    ]
    assert server.request_count == 2
