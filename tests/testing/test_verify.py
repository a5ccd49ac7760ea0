"""`phasegraph test` and its pytest helpers: properties that can fail for the user's
graph, crash-equivalence with its real actions, stateful tests generated from a machine,
and failures a person can read under pytest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from builders import TESTS
from phasegraph.spec._loader import machine_source
from phasegraph.testing import (
    PropertyFailed,
    crash_equivalence,
    machine_state_machine,
    machine_test,
    verify,
)

DEFECTS = TESTS / "fixtures" / "defects"
_MAIN = "import sys; from phasegraph.cli import main; sys.exit(main())"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _MAIN, *args], capture_output=True, text=True, cwd=cwd
    )


def test_cli_test_proves_a_shipped_graph() -> None:
    done = _cli("test", "hello", "--input", "who=ada")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines if line[:1] in "oF"] == ["ok"] * 7
    assert "node 'plan' on machine 'task': no budget; no state is entered twice" in done.stdout
    assert "2 of 2 examples hold; they take 2 of the 2 transitions of task" in done.stdout
    assert lines[-1] == "hello: 7 properties, 7 hold, 0 fail"


def test_cli_test_finds_an_action_keeping_state_outside_the_run() -> None:
    done = _cli("test", str(DEFECTS / "keeps_state.yaml"))
    assert done.returncode == 1
    assert "FAILED  crash-equivalence" in done.stdout
    assert "after a crash before commit 3 and a resume, node 'first', step 2 differs" in (
        done.stdout
    )
    assert 'uninterrupted: transition --ok--> done writes {"first_call": 1}' in done.stdout
    assert 'resumed:      transition --ok--> done writes {"first_call": 2}' in done.stdout


def test_cli_test_json_names_each_property() -> None:
    import json

    done = _cli("test", "--json", str(DEFECTS / "gap_budget.yaml"))
    assert done.returncode == 1
    verdicts = {r["property"]: r["ok"] for r in json.loads(done.stdout)}
    assert verdicts == {
        "check": False,
        "liveness": False,
        "termination": True,
        "outcomes": True,
        "examples": True,
    }


def test_crash_equivalence_passes_deterministic_actions() -> None:
    report = crash_equivalence("hello", {"who": "ada"})
    assert report.first is None
    assert report.crashes == report.commits - 1 > 3


def test_verify_reports_the_termination_bound_from_budgets() -> None:
    [termination] = [r for r in verify("quality_loop") if r.name == "termination"]
    assert termination.ok
    assert termination.details == (
        "machine 'quality_loop': think: at most 7 (one per entry into execute); verify: at "
        "most 2 (one per entry into verify); reflect: at most 1 (one per entry into reflect); "
        "execute, reflect, verify repeat, every lap spending a budget",
    )


def test_graph_test_fails_readably_under_pytest(tmp_path: Path) -> None:
    """The failure shows the finding and the trace, not the kit's source."""
    (tmp_path / "test_user.py").write_text(
        "from phasegraph.testing import graph_test, machine_test\n"
        f"test_keeps_state = graph_test({str(DEFECTS / 'keeps_state.yaml')!r})\n"
        f"test_gap = machine_test({str(DEFECTS / 'gap_payload.yaml')!r})\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    out = done.stdout
    assert "2 failed" in out
    assert "keeps_state.yaml: 1 of 7 properties fail" in out
    assert "- crash-equivalence:" in out
    assert "trigger 'decide' in state 'review' is refused by every guard" in out
    assert "shortest trace: review --decide--> refused" in out
    assert "_verify.py" not in out  # no kit frames
    assert "__tracebackhide__" not in out


def test_machine_test_passes_a_correct_machine() -> None:
    machine_test("spec_review")()


def test_machine_test_raises_property_failed() -> None:
    with pytest.raises(PropertyFailed, match="termination"):
        machine_test(DEFECTS / "unbounded_loop.yaml")()


# --------------------------------------------------------------------------- stateful


def test_generated_state_machine_runs_a_nested_machine() -> None:
    machine = machine_state_machine("guarded_quality_loop")
    run_state_machine_as_test(machine, settings=settings(max_examples=20, deadline=None))


def test_generated_state_machine_finds_a_refused_trigger(tmp_path: Path) -> None:
    text = machine_source("quality_loop").read_text(encoding="utf-8")
    fallback = r"^  - \{trigger: fail, source: verify, dest: gave_up_after_reflections\}\n"
    path = tmp_path / "quality_loop.yaml"
    path.write_text(re.sub(fallback, "", text, flags=re.M), encoding="utf-8")
    machine = machine_state_machine(path)
    with pytest.raises(PropertyFailed) as info:
        run_state_machine_as_test(machine, settings=settings(max_examples=200, deadline=None))
    message = str(info.value)
    assert "trigger 'fail' (payload {}) in state 'verify' is refused" in message
    assert "its path: execute --" in message


def test_users_subclass_to_add_invariants() -> None:
    class NoSecondReflection(machine_state_machine("quality_loop")):  # type: ignore[misc]
        @invariant()
        def reflects_at_most_twice(self) -> None:
            assert self.visited.count("reflect") <= 1, " ".join(self.moves)

    run_state_machine_as_test(NoSecondReflection, settings=settings(max_examples=30, deadline=None))

    class Broken(machine_state_machine("quality_loop")):  # type: ignore[misc]
        @invariant()
        def never_verifies(self) -> None:
            assert "verify" not in self.visited, " ".join(self.moves)

    with pytest.raises(AssertionError, match="execute --"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=30, deadline=None))


def test_property_kit_failures_read_as_the_finding_and_trace(tmp_path: Path) -> None:
    """machine_properties under pytest: a failing property shows its message, the path
    and hypothesis's minimal script, and none of the kit's frames."""
    (tmp_path / "test_user.py").write_text(
        "from phasegraph.testing import _runs, machine_properties\n"
        "def planted(subject, node_id, node, records):\n"
        "    if node.path == ('verify',):\n"
        "        raise _runs._fail(subject, node_id, records, 'reached verify (planted)')\n"
        "_runs._check_node = planted\n"
        "test_quality = machine_properties('quality_loop', max_examples=20)\n"
        f"test_gap = machine_properties({str(DEFECTS / 'gap_budget.yaml')!r})\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    out = done.stdout
    assert "2 failed" in out
    assert "node 'quality_loop' reached verify (planted)" in out
    assert "its path: execute --" in out
    assert "properties_of_quality_loop(" in out  # the minimal script
    assert "gap_budget.yaml does not pass `phasegraph check`" in out
    assert "_machines.py" not in out
    assert "_runs.py" not in out


def test_crash_equivalence_goes_past_gates_with_approve() -> None:
    graph = str(TESTS / "fixtures" / "crash_ok" / "reviewed.yaml")
    waiting = crash_equivalence(graph)
    assert waiting.status == "waiting"
    approved = crash_equivalence(graph, approve=True)
    assert approved.first is None
    assert approved.status == "completed"
    assert approved.commits > waiting.commits


def test_cli_test_expect_names_the_status_a_graph_is_meant_to_end_with(tmp_path: Path) -> None:
    """A run that fails fails the run property, unless --expect says the graph is meant to
    fail; then a run ending otherwise is the failure, shown with its steps."""
    (tmp_path / "fails.yaml").write_text(
        "graph: fails\nnodes:\n  - id: only\n    machine: task\n"
        "    bind: {run: {shell: [sh, -c, 'exit 3'], on_exit: {0: ok, default: fail}}}\n",
        encoding="utf-8",
    )
    plain = _cli("test", "fails.yaml", cwd=tmp_path)
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert "FAILED  run: an uninterrupted run of the graph's own actions does not fail" in (
        plain.stdout
    )
    expected = _cli("test", "fails.yaml", "--expect", "failed", cwd=tmp_path)
    assert expected.returncode == 0, expected.stdout + expected.stderr
    assert "ok      run: an uninterrupted run of the graph's own actions ends failed" in (
        expected.stdout
    )
    assert "as expected" in expected.stdout
    wrong = _cli("test", "fails.yaml", "--expect", "completed", cwd=tmp_path)
    assert wrong.returncode == 1
    assert "the run ended failed after" in wrong.stdout
    assert "expected to end completed" in wrong.stdout
    refused = _cli("test", "fails.yaml", "--expect", "done", cwd=tmp_path)
    assert refused.returncode == 2
    assert "invalid choice: 'done'" in refused.stderr
