"""The run's error log: records from the interpreter and from actions, the run summary,
and the ``phasegraph errors`` command.

Scenarios from note 004 (ErrorRecord, error logging, the errors command and its UX).
"""

from __future__ import annotations

import json

from builders import engine, prepared
from concern_kit import concern_graph, node, run_graph, script
from phasegraph import cli
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.cli._errors import render_errors
from phasegraph.concerns import fallback
from phasegraph.concerns.errorlog import log_error
from phasegraph.errors import ActionError
from phasegraph.model import NodeStatus, RunStatus
from phasegraph.store.memory import MemoryStore
from phasegraph.store.sqlite import SqliteStore
from phasegraph.views import error_rows, recovered_nodes, run_summary


def two_tasks():
    return concern_graph([node("a", "task"), node("b", "task", needs=["a"])])


async def test_clean_run_has_an_empty_log():
    """004 "error log created on first failure (not pre-created)"; success case: no errors."""
    state, _ = await run_graph(
        two_tasks(), {("a", "run"): script(["ok"]), ("b", "run"): script(["ok"])}
    )
    assert state.errors == ()
    assert run_summary(state) == "2/2 nodes succeeded"
    assert render_errors(state).startswith(f"run {state.run_id} (test): no errors")


async def test_action_logged_records_keep_every_field():
    """004 ErrorRecord {timestamp, agent, stage, message, severity, recovered, details}:
    an action adds records through the error_log event."""

    async def careful(ctx: ActionContext) -> ActionResult:
        log_error(
            ctx,
            "cache miss, fetched again",
            severity="warning",
            recovered=True,
            details={"key": "deps"},
        )
        return ActionResult(trigger="ok")

    state, _ = await run_graph(two_tasks(), {("a", "run"): careful, ("b", "run"): script(["ok"])})
    (record,) = state.errors
    assert (record.node, record.state, record.severity) == ("a", "run", "warning")
    assert record.recovered is True
    assert record.message == "cache miss, fetched again"
    assert dict(record.details) == {"key": "deps"}
    assert record.time.tzinfo is not None


async def test_handled_error_and_node_failure_are_recorded():
    """004 "verify error is logged": a raised error routed to `error` and a failed node each
    leave a record; the dependent node is skipped."""
    state, _ = await run_graph(
        two_tasks(), {("a", "run"): script([ActionError("exit 2")]), ("b", "run"): script(["ok"])}
    )
    assert state.nodes["b"].status is NodeStatus.SKIPPED
    assert [r.message for r in state.errors] == ["exit 2"]
    assert state.errors[0].severity == "error"
    assert run_summary(state) == "0/2 nodes succeeded, 1 failed, 1 skipped"


async def test_emergency_record_is_kept_with_the_failure():
    """004: an emergency's record and the node's failure record both reach the log."""
    definition = concern_graph([node("w", "fallback_chain", settings={"budgets": {"retries": 0}})])
    actions = {
        ("w", "main"): script([ActionError("model refused")]),
        ("w", "recover"): fallback.recover,
        ("w", "emergency"): fallback.emergency,
    }
    state, history = await run_graph(definition, actions)
    assert [r.severity for r in state.errors] == ["error", "critical", "error"]
    assert history[-1].errors[0].severity == "critical"
    assert state.errors[-1].details["outcome"] == "failed"


async def test_summary_counts_recovered_nodes_only_when_they_succeeded():
    """004 "[ok] pipeline complete (9/9 agents succeeded, 1 recovered)"."""
    definition = concern_graph(
        [node("w", "fallback_chain"), node("x", "task", needs=["w"]), node("y", "task")]
    )
    actions = {
        ("w", "main"): script([ActionError("flaky"), "ok"]),
        ("w", "recover"): fallback.recover,
        ("w", "emergency"): fallback.emergency,
        ("x", "run"): script(["ok"]),
        ("y", "run"): script([ActionError("broken")]),
    }
    state, _ = await run_graph(definition, actions)
    assert recovered_nodes(state) == {"w"}
    assert run_summary(state) == "2/3 nodes succeeded, 1 recovered, 1 failed"


async def test_errors_view_marks_records_of_recovered_nodes():
    """004 errors command: "✓ Recovered successfully" vs "✗ Unrecovered failure"."""
    definition = concern_graph([node("w", "fallback_chain"), node("y", "task")])
    actions = {
        ("w", "main"): script([ActionError("flaky"), "ok"]),
        ("w", "recover"): fallback.recover,
        ("w", "emergency"): fallback.emergency,
        ("y", "run"): script([ActionError("broken")]),
    }
    state, _ = await run_graph(definition, actions)
    rows = error_rows(state)
    assert [(r["node"], r["recovered"]) for r in rows] == [
        ("w", True),
        ("w", True),
        ("y", False),
    ]
    assert set(rows[0]) == {"time", "node", "state", "message", "severity", "recovered", "details"}
    text = render_errors(state)
    assert "] ERROR    w (main)  recovered\n    flaky" in text
    assert "] WARNING  w (recovery)  recovered" in text
    assert "] ERROR    y (run)  NOT recovered\n    broken" in text
    assert "Total: 3 records (2 recovered, 1 unrecovered)" in text
    assert [r["node"] for r in error_rows(state, "y")] == ["y"]


async def test_records_survive_the_store_and_a_resume(tmp_path):
    """004 "safe state handling": the log is part of the snapshot, so a resumed run keeps it."""
    definition = concern_graph([node("w", "fallback_chain"), node("z", "task", needs=["w"])])
    actions = {
        ("w", "main"): script([ActionError("flaky"), "ok"]),
        ("w", "recover"): fallback.recover,
        ("w", "emergency"): fallback.emergency,
        ("z", "run"): script(["ok"]),
    }
    async with SqliteStore(tmp_path / "runs.db") as store:
        eng = engine(store)
        async with eng.start(prepared(definition, actions)) as run:
            for _ in range(3):  # start, main --error--> recovery, recovery --retry--> retry
                await run.next()
            run_id = run.run_id
        resumed = await eng.resume(run_id, graph=prepared(definition, actions))
        again = await eng.get(run_id)
    assert resumed.status is RunStatus.COMPLETED
    assert [r.state for r in again.errors] == ["main", "recovery"]
    assert again.errors == resumed.errors


# --------------------------------------------------------------------------- the CLI


def _run_cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_errors_command_prints_readably_and_as_json(tmp_path, capsys):
    """004 "new --errors command: pretty-print the full error log" and "--raw for JSON"."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    code, out, _ = _run_cli(
        capsys, "run", "agent_pipeline", "--store", store, "--run-id", "r1", "-q"
    )
    assert code == 0
    assert "9/9 nodes succeeded, 1 recovered" in out
    code, out, _ = _run_cli(capsys, "errors", "r1", "--store", store)
    assert code == 0
    assert out.startswith("Error log of run r1 (agent_pipeline)")
    assert "ERROR    analyzer (main)  recovered" in out
    assert "WARNING  analyzer (recovery)  recovered" in out
    assert "Analyzer output validation failed: output looks like JSON but does not parse" in out
    assert "Total: 2 records (2 recovered, 0 unrecovered); 9/9 nodes succeeded, 1 recovered" in out
    code, out, _ = _run_cli(capsys, "errors", "r1", "--store", store, "--json")
    log = json.loads(out)
    assert (log["run_id"], log["summary"]) == ("r1", "9/9 nodes succeeded, 1 recovered")
    rows = log["errors"]
    assert [(r["node"], r["state"], r["severity"], r["recovered"]) for r in rows] == [
        ("analyzer", "main", "error", True),
        ("analyzer", "recovery", "warning", True),
    ]
    assert rows[0]["details"]["agent"] == "Analyzer"
    code, out, _ = _run_cli(capsys, "errors", "r1", "--store", store, "--node", "fixer")
    assert "no errors for node fixer" in out


def test_errors_command_refuses_an_unknown_run(tmp_path, capsys):
    """004 "clear error surfaces": an unknown run is one line on stderr, exit 2."""
    code, _out, err = _run_cli(
        capsys, "errors", "nope", "--store", f"sqlite:///{tmp_path / 'x.db'}"
    )
    assert code == 2
    assert "nope" in err
    assert "Traceback" not in err


async def test_records_roundtrip_through_the_store():
    """The error log is encoded with the commits and decodes to the same records."""
    async with MemoryStore() as memory:
        eng = engine(memory)
        state = await eng.run(
            prepared(
                two_tasks(),
                {("a", "run"): script([ActionError("x")]), ("b", "run"): script(["ok"])},
            )
        )
        stored = await eng.get(state.run_id)
    assert stored.errors == state.errors
