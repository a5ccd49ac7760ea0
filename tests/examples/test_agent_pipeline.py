"""The agent_pipeline example graph and the output-validation rules it uses.

Scenarios from note 004 (enterprise fail-path: validators, error logging, recovery, the
CLI's success / recovered / unrecovered reports) on the nine-agent sequential pipeline.
"""

from __future__ import annotations

import pytest

from concern_kit import concern_graph, node, path_trail, run_graph
from phasegraph import cli
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.concerns import fallback
from phasegraph.concerns.validation import validate_output
from phasegraph.graphs import agent_pipeline
from phasegraph.model import NodeOutcome, NodeStatus, RunStatus, replace
from phasegraph.spec import load_graph
from phasegraph.store.memory import MemoryStore
from phasegraph.views import run_summary

AGENTS = [
    "installer",
    "env_doctor",
    "analyzer",
    "dep_auditor",
    "bug_triage",
    "fixer",
    "test_runner",
    "web_doctor",
    "pr_preparer",
]


async def run_pipeline(run_input=None, **node_settings):
    """Run the shipped graph (optionally with extra `with` settings on every node)."""
    definition = load_graph("agent_pipeline")
    if node_settings:
        nodes = tuple(
            replace(n, settings={**n.settings, **node_settings}) for n in definition.nodes
        )
        definition = replace(definition, nodes=nodes)
    async with MemoryStore() as store:
        eng = Engine(store)
        state = await eng.run(definition, run_input or {})
        return state, await eng.history(state.run_id)


def test_graph_is_nine_sequential_fallback_chains():
    """004 "CodeCompanion runs 9 agents sequentially", each behind the fail-path wrapper."""
    definition = load_graph("agent_pipeline")
    assert [n.id for n in definition.nodes] == AGENTS
    assert all(n.machine == "fallback_chain" for n in definition.nodes)
    for before, after in zip(definition.nodes, definition.nodes[1:], strict=False):
        assert after.needs == (before.id,)
    assert "scripted stand-ins for a model" in definition.description


async def test_clean_run_succeeds_without_errors():
    """004 "Success Case (No Errors)": every agent succeeds, "9/9 agents succeeded"."""
    state, history = await run_pipeline({"flaky": "none"})
    assert state.status is RunStatus.COMPLETED
    assert run_summary(state) == "9/9 nodes succeeded"
    assert state.errors == ()
    assert all(path_trail(history, a) == ["main", "done"] for a in AGENTS)
    assert state.data["pr_preparer"]["body"] == "fix: router drops a trailing slash"


async def test_default_run_recovers_the_analyzer():
    """004 "Failure with Recovery": the analyzer's output fails validation, recovery is
    attempted, the retry validates → "9/9 agents succeeded, 1 recovered"."""
    state, history = await run_pipeline()
    assert state.status is RunStatus.COMPLETED
    assert run_summary(state) == "9/9 nodes succeeded, 1 recovered"
    assert path_trail(history, "analyzer") == ["main", "recovery", "retry", "recovered"]
    assert state.data["analyzer"]["patterns"] == ["repository", "command dispatch"]
    assert [(r.node, r.state, r.severity) for r in state.errors] == [
        ("analyzer", "main", "error"),
        ("analyzer", "recovery", "warning"),
    ]
    first = state.errors[0]
    assert first.message.startswith("Analyzer output validation failed: output looks like JSON")
    assert first.details["provider"] == "gpt4"
    assert "error" not in state.data


async def test_unrecovered_failure_halts_the_pipeline():
    """004 "Unrecovered Failure": the fixer fails validation and cannot be recovered →
    pipeline halted at the fixer, its dependents skipped, the error structured."""
    state, history = await run_pipeline({"flaky": "none", "broken": "fixer"})
    assert state.status is RunStatus.FAILED
    assert state.nodes["fixer"].outcome is NodeOutcome.FAILED
    assert [a for a in AGENTS if state.nodes[a].status is NodeStatus.SKIPPED] == AGENTS[6:]
    assert run_summary(state) == "5/9 nodes succeeded, 1 failed, 3 skipped"
    assert path_trail(history, "fixer") == ["main", "recovery", "retry", "emergency", "failed"]
    assert state.data["error"]["error_code"] == "action_failed"
    assert "Fixer output validation failed" in state.data["error"]["original_error"]
    assert [r.severity for r in state.errors] == ["error", "warning", "error", "critical", "error"]


async def test_failing_tool_run_is_recovered():
    """004 tooling agents: a non-zero return code is a validation failure (recovered)."""
    state, _ = await run_pipeline({"flaky": "installer"})
    assert run_summary(state) == "9/9 nodes succeeded, 1 recovered"
    assert "exited with status 1: error: resolver timed out" in state.errors[0].message


async def test_no_retries_means_fail_fast():
    """004 settings `max_attempts` (here the retries budget): with 0 retries the first
    invalid output goes straight to the emergency."""
    state, history = await run_pipeline(budgets={"retries": 0})
    assert path_trail(history, "analyzer") == ["main", "emergency", "failed"]
    assert run_summary(state) == "2/9 nodes succeeded, 1 failed, 6 skipped"


def test_cli_run_reports_the_recovery_and_points_to_errors(tmp_path, capsys, monkeypatch):
    """004 CLI: `run` ends with the summary; the log is readable with `errors`."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "agent_pipeline", "--run-id", "p1", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "run p1 completed: 9/9 nodes succeeded, 1 recovered"
    assert cli.main(["errors", "p1"]) == 0
    assert "Total: 2 records (2 recovered, 0 unrecovered)" in capsys.readouterr().out
    assert cli.main(["run", "agent_pipeline", "--input", "broken=fixer", "-q"]) == 1


# --------------------------------------------------------------------------- validators


@pytest.mark.parametrize(
    ("output", "kind", "required", "issue"),
    [
        ("", "llm", (), "output is empty"),
        (None, "tooling", (), "output is empty"),
        ({}, "llm", (), "output is empty"),
        ({"summary": ""}, "llm", (), "every value of the output is empty"),
        ({"summary": "ok"}, "llm", ("summary", "patches"), "required key 'patches'"),
        ("too short", "llm", (), "shorter than 20 characters"),
        ("I cannot help with analysing this repository.", "llm", (), "model failure"),
        ("Error: the context window was exceeded, sorry", "llm", (), "model failure"),
        ('{"summary": "cut off', "llm", (), "looks like JSON but does not parse"),
        ('{"n": ' + "9" * 5000 + "}", "llm", (), "looks like JSON but cannot be read"),
        ({"returncode": 2, "stderr": "boom"}, "tooling", (), "exited with status 2: boom"),
        ({"stdout": "fine"}, "tooling", (), "mapping with a returncode"),
        (42, "llm", (), "expected a mapping or text"),
    ],
)
async def test_each_validation_rule_fails_the_agent(output, kind, required, issue):
    """004 validators: each rule (non-empty, keys, length, failure patterns, JSON, return
    codes) flags the output; through the interpreter the agent's node then goes to
    recovery and, the output staying bad, to the emergency."""
    verdict = validate_output("Agent", output, kind=kind, required=required)
    assert not verdict.ok
    assert any(issue in text for text in verdict.issues)

    async def agent(ctx: ActionContext) -> ActionResult:
        result = validate_output("Agent", output, kind=kind, required=required)
        if result.ok:
            return ActionResult(trigger="ok")
        return ActionResult(trigger="fail", payload={"message": "; ".join(result.issues)})

    definition = concern_graph([node("a", "fallback_chain")])
    actions = {
        ("a", "main"): agent,
        ("a", "recover"): fallback.recover,
        ("a", "emergency"): fallback.emergency,
    }
    state, _ = await run_graph(definition, actions)
    assert state.nodes["a"].outcome is NodeOutcome.FAILED
    assert issue in state.data["error"]["original_error"]


@pytest.mark.parametrize(
    ("output", "kind", "required"),
    [
        ({"summary": "fine", "patches": ["x"]}, "llm", ("summary", "patches")),
        ("A perfectly reasonable answer about the code.", "llm", ()),
        ('{"summary": "complete JSON is fine"}', "llm", ()),
        ({"returncode": 0, "stdout": "ok"}, "tooling", ()),
    ],
)
def test_valid_outputs_pass(output, kind, required):
    """004 "if issues empty → immediate success"; "agents that always succeed see no change"."""
    verdict = validate_output("Agent", output, kind=kind, required=required)
    assert verdict.ok
    assert verdict.issues == ()
    assert verdict.raw is output


def test_every_agent_has_a_script():
    """The stand-in agents cover the nine nodes, and their answers validate."""
    definition = load_graph("agent_pipeline")
    assert set(agent_pipeline.SCRIPTS) == set(AGENTS)
    data = {"bug_triage": {"bugs": ["b"]}, "fixer": {"patches": ["p"]}}
    for spec in definition.nodes:
        answer = agent_pipeline.SCRIPTS[spec.id](data)
        verdict = validate_output(
            spec.id,
            answer,
            kind=spec.settings["kind"],
            required=spec.settings.get("required", ()),
        )
        assert verdict.ok, (spec.id, verdict.issues)
