"""The shipped examples ``team_pipeline`` and ``coding_task``, run for real.

team_pipeline covers note 003 (U2 concurrency limit on a team DAG) and note 000 (U4 phase
rollback on a real git repository); coding_task covers note 001 (U8 spec review gate,
AE1 verify-fail → reflect → retry, AE4) and note 002 (SOLO phases with tool rules).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.model import NodeStatus, RunStatus, apply_records
from phasegraph.run import prepare
from phasegraph.spec import load_graph
from phasegraph.store import open_store
from phasegraph.views import run_summary


def git(repo: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def test_team_pipeline_shape():
    """Note 003: at least six phases in at least three layers, under a limit below the
    width of its widest layer."""
    definition = load_graph("team_pipeline")
    workflow = prepare(definition, "team_pipeline").workflow
    assert len(definition.nodes) >= 6
    assert len(workflow.layers) >= 3
    assert definition.concurrency < max(len(layer) for layer in workflow.layers)
    assert {n.machine for n in definition.nodes} == {"team_phase"}


def test_team_pipeline_rolls_back_the_failed_phase_and_skips_its_dependents(tmp_path: Path):
    """Note 000 U4 + note 003 U2, end to end: `migrate` changes the tracked schema and
    fails; validation sees the change, the committed schema is restored, the checkpoint
    records the rollback, the phases that need it are skipped, and never more than two
    phases ran at once."""

    async def scenario():
        async with open_store("memory://") as store:
            engine = Engine(store)
            state = await engine.run("team_pipeline", {"workdir": str(tmp_path)})
            history = await engine.history(state.run_id)
            first = await engine.get(state.run_id, 0)
        return state, history, first

    state, history, first = asyncio.run(scenario())
    statuses = {node_id: node.status for node_id, node in state.nodes.items()}
    assert statuses == {
        "scaffold": NodeStatus.COMPLETED,
        "schema": NodeStatus.COMPLETED,
        "api": NodeStatus.COMPLETED,
        "docs": NodeStatus.COMPLETED,
        "migrate": NodeStatus.FAILED,
        "integrate": NodeStatus.COMPLETED,
        "release": NodeStatus.SKIPPED,
        "announce": NodeStatus.SKIPPED,
    }
    assert state.status is RunStatus.FAILED
    assert run_summary(state).startswith("5/8 nodes succeeded, 1 failed, 2 skipped")

    repo = Path(state.data["repo"])
    assert (repo / "schema.sql").read_text() == git(repo, "show", "HEAD:schema.sql")
    assert "alter table" not in (repo / "schema.sql").read_text()
    assert git(repo, "status", "--porcelain", "--", "schema.sql") == ""
    record = state.data["checkpoints"]["migrate"]
    assert record["rolled_back"] is True
    assert "NOT NULL" in record["reason"]
    assert sorted(state.data["checkpoints"]) == [
        "api", "docs", "integrate", "migrate", "scaffold", "schema",
    ]  # fmt: skip
    kinds = [e["kind"] for r in history for e in r.events if e["kind"].startswith("phase_")]
    assert kinds == ["phase_rollback_started", "phase_rollback_completed"]

    peak, current = 0, first
    for record in history[1:]:
        current = apply_records(current, [record])
        running = [n for n in current.nodes.values() if n.status is NodeStatus.RUNNING]
        peak = max(peak, len(running))
    assert peak == 2


def test_team_pipeline_cli_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`phasegraph run team_pipeline` exits 1 and its summary says what failed, what was
    rolled back and what was skipped."""
    code = main(
        ["run", "team_pipeline", "-q", "--store", "memory://", "--input", f"workdir={tmp_path}"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "failed: 5/8 nodes succeeded, 1 failed, 2 skipped" in out
    assert "rolled back with \"sh -c 'git show HEAD:schema.sql > schema.sql'\"" in out


def test_coding_task_waits_for_review_then_reply_drives_it_to_delivery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """Note 001 AE4 + AE1 and note 002 on the shipped example, with its offline model: the
    run waits at the spec review (exit 3); `phasegraph reply --reject` replans with the
    feedback; `--confirm` continues; the model's early write is refused in planning; its
    first draft fails pytest, it reflects, and the fix passes; it commits the change."""
    for name in ("PHASEGRAPH_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["-q", "--store", store]
    assert main(["run", "coding_task", *common, "--input", f"workdir={tmp_path}"]) == 3
    waiting = capsys.readouterr().out
    run_id = waiting.split()[1]
    gate = f"{run_id}:spec:spec_review"
    assert f"--id {gate}" in waiting
    assert main(["reply", run_id, "--id", gate, "--reject", "keep it short", *common]) == 3
    capsys.readouterr()
    assert main(["reply", run_id, "--id", gate, "--confirm", *common]) == 0
    assert "completed: 4/4 nodes succeeded" in capsys.readouterr().out

    async def inspect():
        async with open_store(store) as opened:
            engine = Engine(opened)
            return await engine.get(run_id), await engine.history(run_id)

    state, history = asyncio.run(inspect())
    assert state.data["spec"].endswith("Revised for the reviewer: keep it short.")
    verdicts = [r.trigger for r in history if r.source[-1:] == ("verify",)]
    assert verdicts == ["fail", "pass"]
    [reflection] = [r for r in history if r.source[-1:] == ("reflect",)]
    assert "skips the first value" in reflection.appended["conversation"][-1]["content"]
    violations = [e for r in history for e in r.events if e["kind"] == "phase_violation"]
    assert [(e["tool"], e["phase"]) for e in violations] == [("write_file", "planning")]
    repo = Path(state.data["repo"])
    assert git(repo, "log", "--format=%s") == "calc: implement total\ncalc: stub and tests\n"
    assert "return sum(values)" in (repo / "calc.py").read_text()
    assert state.data["commit"] in state.data["summary"]


def test_coding_task_approve_runs_to_completion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """`phasegraph run coding_task --approve` answers the gate and completes (offline)."""
    for name in ("PHASEGRAPH_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    args = ["run", "coding_task", "--approve", "-q", "--store", "memory://"]
    code = main([*args, "--input", f"workdir={tmp_path}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "completed: 4/4 nodes succeeded" in out
