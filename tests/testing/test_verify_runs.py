"""`phasegraph test` runs the graph's own actions: a run that fails fails the suite,
shown with its steps and error log, and each result is printed as soon as it is known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from builders import TESTS
from phasegraph.testing import crash_equivalence, verify
from phasegraph.testing._crash import uninterrupted_run

RUNS = TESTS / "fixtures" / "runs"
_MAIN = "import sys; from phasegraph.cli import main; sys.exit(main())"


def test_a_failing_run_fails_the_suite_with_its_trace() -> None:
    results = {r.name: r for r in verify(str(RUNS / "fails.yaml"))}
    assert [name for name, r in results.items() if not r.ok] == ["run"]
    [trace] = results["run"].details
    assert trace.startswith("the run ended failed after 3 commits:")
    assert "node 'fetch': start run ; transition --fail--> failed" in trace
    assert "error: node 'fetch' in 'failed': finished with outcome failed" in trace


def test_a_run_stopped_at_a_gate_is_not_a_failure() -> None:
    graph = str(TESTS / "fixtures" / "crash_ok" / "reviewed.yaml")
    [run] = [r for r in verify(graph) if r.name == "run"]
    assert run.ok
    assert run.details[0].startswith("the run stopped waiting at a gate")
    assert "--approve answers every gate" in run.details[0]


def test_results_stream_before_the_runs_end(tmp_path: Path) -> None:
    """The graph's action waits for a file this test creates only once it has read the
    proofs' lines: were output held until the runs end, the action would give up (after
    two minutes) and the run property would fail."""
    go = tmp_path / "go"
    with subprocess.Popen(
        [sys.executable, "-c", _MAIN, "test", str(RUNS / "waits.yaml"), "--input", f"go={go}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("ok      check:")
        go.touch()
        rest, errors = process.communicate()
    assert process.returncode == 0, first + rest + errors
    assert "ok      run: an uninterrupted run" in rest
    assert rest.splitlines()[-1].endswith("7 properties, 7 hold, 0 fail")


def test_input_the_graph_rejects_is_one_clear_error() -> None:
    """Raised in the run's own process, it reaches the command line as it was raised."""
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "test", str(RUNS / "waits.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "graph 'waits' rejects the run input" in done.stderr
    assert "'go' is a required property" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_runs_drive_child_runs_and_crash_in_their_commits_too() -> None:
    """A graph whose nodes run graphs of their own: the uninterrupted run drives its child
    runs to the end, and a crash before any of their commits (or the parent's) resumes to
    the same end."""
    graph = str(TESTS / "fixtures" / "children" / "map.yaml")
    first = uninterrupted_run(graph, {"n": 0, "items": [3, 1, 2], "width": 2})
    assert first.status == "completed"
    assert '"outs": [{"value": 3}, {"value": 1}, {"value": 2}]' in first.data
    report = crash_equivalence(graph, {"n": 0, "items": [3, 1, 2], "width": 2}, first=first)
    assert report.first is None, str(report.first)
    # The parent's commits and each child's (creation, start, end) are all crash points.
    assert report.crashes == report.commits - 1 >= 3 * 3
