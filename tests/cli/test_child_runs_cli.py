"""Child runs through the real command line, on SQLite: no workers, one process does it all.

``phasegraph run`` of a graph whose nodes run graphs as runs of their own drives those
child runs too, and the parent as they end; a child that waits for a person is answered
with ``phasegraph reply`` and its parent goes on; ``check`` names a child graph that is
not there.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from builders import TESTS, cli_argv

FIXTURES = TESTS / "fixtures" / "children"


def _cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", store)
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def _show(store: str, run_id: str) -> dict[str, Any]:
    shown = _cli(store, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    view: dict[str, Any] = json.loads(shown.stdout)
    return view


def _runs(store: str) -> list[dict[str, Any]]:
    listed = _cli(store, "status", "--json")
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def test_run_drives_a_map_of_child_runs_to_the_end_in_one_process(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    done = _cli(
        store, "run", str(FIXTURES / "map.yaml"), "--run-id", "m1", "-q",
        "--input", "n=5", "--input", "width=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.startswith("run m1 completed")
    assert "Traceback" not in done.stderr
    assert _show(store, "m1")["data"]["outs"] == [{"value": item} for item in range(5)]
    children = [run for run in _runs(store) if run["graph"] == "item"]
    assert len(children) == 5
    assert {run["status"] for run in children} == {"completed"}
    assert all(run["run_id"].startswith("m1.each.") for run in children)
    for run in children:
        history = json.loads(_cli(store, "history", run["run_id"], "--json").stdout)
        assert [h["status"] for h in history].count("completed") == 1  # ended once
        assert history[0]["result"]["child_of"]["run"] == "m1"


def test_a_child_waiting_for_a_person_is_answered_and_its_parent_goes_on(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    waiting = _cli(store, "run", str(FIXTURES / "asks.yaml"), "--run-id", "a1", "-q")
    assert waiting.returncode == 3, waiting.stderr
    (child,) = [run["run_id"] for run in _runs(store) if run["graph"] == "ask"]
    assert f"node sub waits for child run {child}" in waiting.stdout
    assert f"phasegraph status {child} --store {store}" in waiting.stdout
    asked = _cli(store, "status", child)
    assert f"--id {child}:ask:run --trigger ok" in asked.stdout  # a person's gate, as ever
    answered = _cli(
        store, "reply", child, "--id", f"{child}:ask:run", "--trigger", "ok",
        "--data", "answer=42", "-q",
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr + answered.stdout
    parent = _show(store, "a1")
    assert parent["status"] == "completed"
    assert parent["data"]["got"] == {"answer": 42}


def test_a_cancelled_child_fails_its_parent_once_the_parent_is_resumed(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _cli(store, "run", str(FIXTURES / "asks.yaml"), "--run-id", "c1", "-q").returncode == 3
    (child,) = [run["run_id"] for run in _runs(store) if run["graph"] == "ask"]
    cancelled = _cli(store, "cancel", child)
    assert cancelled.returncode == 0, cancelled.stderr
    assert (
        f"its parent run c1 takes it as failed once resumed ('phasegraph resume c1 --store "
        f"{store}')" in cancelled.stdout
    )
    resumed = _cli(store, "resume", "c1", "-q")
    assert resumed.returncode == 1, resumed.stderr + resumed.stdout
    parent = _show(store, "c1")
    assert parent["nodes"]["sub"]["payload"]["status"] == "cancelled"


def test_check_names_the_binding_whose_graph_is_not_there(tmp_path: Path) -> None:
    graph = tmp_path / "lost.yaml"
    graph.write_text(
        "graph: lost\nnodes:\n  - id: sub\n    machine: child_run\n    bind:\n"
        "      run: {graph: {graph: nowhere.yaml}}\n"
    )
    checked = subprocess.run(
        cli_argv("check", str(graph)), capture_output=True, text=True, timeout=120, check=False
    )
    assert checked.returncode == 1
    assert f"{graph}:6:21: error: node 'sub': graph file 'nowhere.yaml' not found" in (
        checked.stdout
    )
    ran = _cli(f"sqlite:///{tmp_path / 'runs.db'}", "run", str(graph))
    assert ran.returncode == 2  # refused as bad input before anything is committed
    assert "nowhere.yaml" in ran.stderr
    assert "Traceback" not in ran.stderr
