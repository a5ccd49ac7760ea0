"""``team_plan`` as a user runs it: the real command line, a plan file, real commands.

Each phase's command is ``probe.py`` (``tests/fixtures/plans``), which logs the phase and
counts the phases running at once under a file lock: the most seen at once may never
pass the plan's limit, however the processes are scheduled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from builders import TESTS, cli_argv

FIXTURES = TESTS / "fixtures" / "plans"
PROBE = FIXTURES / "probe.py"
SIX = [  # three layers: a; b, c, d; e, f
    ("a", []),
    ("b", ["a"]),
    ("c", ["a"]),
    ("d", ["a"]),
    ("e", ["b", "c"]),
    ("f", ["d"]),
]


def plan_file(folder: Path, phases: list[tuple[str, list[str]]], limit: int = 2) -> Path:
    probes = folder / "probes"
    probes.mkdir(exist_ok=True)
    plan = {
        "max_concurrent_phases": limit,
        "workdir": str(folder / "work"),
        "plan": {
            "phases": [
                {
                    "id": phase,
                    "depends_on": needs,
                    "command": [sys.executable, str(PROBE), phase, str(probes)],
                    "validation_command": [sys.executable, "-c", "pass"],
                }
                for phase, needs in phases
            ]
        },
    }
    path = folder / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


def phasegraph(
    folder: Path, *args: str, kill_at: int | None = None
) -> subprocess.CompletedProcess[str]:
    store = f"sqlite:///{folder / 'runs.db'}"
    argv = cli_argv(*args, "--store", store)
    if kill_at is not None:  # the same command, killed right after it commits step kill_at
        argv = [sys.executable, str(FIXTURES / "kill_at.py"), str(kill_at), *args, "--store", store]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def ran(folder: Path) -> Counter[str]:
    log = folder / "probes" / "log"
    return Counter(log.read_text().split()) if log.exists() else Counter()


def shown(folder: Path, run_id: str) -> dict[str, Any]:
    return json.loads(phasegraph(folder, "show", run_id, "--json").stdout)


def test_a_six_phase_plan_runs_in_layers_within_its_limit(tmp_path: Path) -> None:
    plan = plan_file(tmp_path, SIX, limit=2)
    done = phasegraph(tmp_path, "run", "team_plan", "--input-file", str(plan), "--run-id", "six")
    assert done.returncode == 0, done.stderr
    assert ran(tmp_path) == Counter("abcdef")  # each command once
    assert int((tmp_path / "probes" / "most").read_text()) <= 2  # never more than the limit
    status = json.loads(phasegraph(tmp_path, "status", "six", "--json").stdout)
    children = {k: v for k, v in status["nodes"].items() if k.startswith("phases.")}
    assert set(children) == {f"phases.{p}" for p, _ in SIX}  # keys end in the plan's ids
    assert {v["status"] for v in children.values()} == {"completed"}
    state = shown(tmp_path, "six")
    checkpoints = state["data"]["checkpoints"]
    assert {k: v["status"] for k, v in checkpoints.items()} == dict.fromkeys(children, "completed")
    # Every phase started after the phases it needs had completed: layer by layer.
    history = json.loads(phasegraph(tmp_path, "history", "six", "--json").stdout)
    completed_at: dict[str, int] = {}
    for record in history:
        for node_id, node in record["nodes"].items():
            if node["status"] == "completed":
                completed_at.setdefault(node_id, record["seq"])
        if record["kind"] == "start" and record["node"].startswith("phases."):
            needs = dict(SIX)[record["node"].removeprefix("phases.")]
            assert all(completed_at[f"phases.{n}"] < record["seq"] for n in needs)
    assert [r["kind"] for r in history].count("expand") == 1


@pytest.mark.parametrize(
    ("phases", "named"),
    [
        (
            [("a", []), ("b", ["a", "d"]), ("c", ["b"]), ("d", ["c"])],
            "phases 'b' -> 'c' -> 'd' -> 'b' form a cycle",
        ),
        ([("a", []), ("b", ["a", "z"])], "phase 'b' depends on 'z', which is not in the plan"),
    ],
    ids=["cycle", "dangling"],
)
def test_a_cyclic_or_dangling_plan_is_refused_before_any_command(
    tmp_path: Path, phases: list[tuple[str, list[str]]], named: str
) -> None:
    plan = plan_file(tmp_path, phases)
    done = phasegraph(tmp_path, "run", "team_plan", "--input-file", str(plan), "--run-id", "bad")
    assert done.returncode == 1
    assert named in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert ran(tmp_path) == Counter()  # no command ran
    assert not [k for k in shown(tmp_path, "bad")["nodes"] if k.startswith("phases.")]


def _finished_before(history: list[dict[str, Any]], seq: int) -> set[str]:
    """The phases whose work had completed (the step after their command) by ``seq``."""
    done = set()
    for record in history:
        if record["seq"] > seq:
            break
        node = record["node"] or ""
        if (
            node.startswith("phases.")
            and record["kind"] == "transition"
            and record["source"] == ["running"]
        ):
            done.add(node.removeprefix("phases."))
    return done


@pytest.mark.parametrize("kill_at", [3, 6, 9, 13, 17, 21, 25, 29])
def test_a_sigkill_at_any_step_then_resume_never_runs_a_finished_phase_again(
    tmp_path: Path, kill_at: int
) -> None:
    plan = plan_file(tmp_path, SIX, limit=2)
    args = ("run", "team_plan", "--input-file", str(plan), "--run-id", "k", "-q")
    killed = phasegraph(tmp_path, *args, kill_at=kill_at)
    assert killed.returncode == -9  # SIGKILL, right after step kill_at was committed
    before = ran(tmp_path)
    resumed = phasegraph(tmp_path, "resume", "k")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    history = json.loads(phasegraph(tmp_path, "history", "k", "--json").stdout)
    after = ran(tmp_path)
    assert set(after) == set("abcdef")
    for phase in _finished_before(history, kill_at):  # committed before the kill: once
        assert after[phase] == 1, (phase, before, after)
    # Only a command in flight at the kill runs again: at most the plan's limit of them.
    assert sum(after.values()) - 6 <= 2
    assert [r["kind"] for r in history].count("expand") == 1  # the plan, committed once


def test_a_sigkill_after_the_plan_then_resume_does_not_ask_the_model_again(
    tmp_path: Path,
) -> None:
    args = ("run", "team_plan", "--input", f"workdir={tmp_path / 'work'}", "--run-id", "m", "-q")
    first = phasegraph(tmp_path, *args)  # the scripted model plans; the run completes
    assert first.returncode == 0, first.stderr
    history = json.loads(phasegraph(tmp_path, "history", "m", "--json").stdout)
    expand = next(r["seq"] for r in history if r["kind"] == "expand")
    again = ("run", "team_plan", "--input", f"workdir={tmp_path / 'again'}", "--run-id", "m2")
    killed = phasegraph(tmp_path, *again, "-q", kill_at=expand + 2)
    assert killed.returncode == -9
    resumed = phasegraph(tmp_path, "resume", "m2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = shown(tmp_path, "m2")
    answers = [m for m in state["data"]["conversation"] if m["role"] == "assistant"]
    assert len(answers) == 1  # the model answered once: the committed plan was kept
    assert state["data"]["plan"] == shown(tmp_path, "m")["data"]["plan"]
    assert (tmp_path / "again" / "calc.zip").is_file()  # the shipped plan's last phase
