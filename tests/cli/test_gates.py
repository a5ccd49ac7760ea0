"""Human gates through the real command line: what a waiting run says, the spec review's
one id, ``--approve``/``--approve-with``, and answering after the graph file changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from builders import TESTS, cli_argv

GATES = TESTS / "fixtures" / "gates"


def _cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", store)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_waiting_message_lists_the_gates_own_triggers_and_exact_commands(tmp_path: Path) -> None:
    store = _store(tmp_path)
    done = _cli(store, "run", str(GATES / "okfail.yaml"), "--run-id", "g1", "-q")
    assert done.returncode == 3, done.stderr
    out = done.stdout
    assert "node review waits at its review gate (id g1:review:run)" in out
    assert "it accepts ok, fail; answer with one of:" in out
    assert f"phasegraph reply g1 --id g1:review:run --trigger ok --store {store}" in out
    assert "--confirm" not in out  # this gate has no `confirm`: never suggest it
    assert "text: hello, world" in out  # what the reviewer is meant to judge
    view = json.loads(_cli(store, "status", "g1", "--json").stdout)
    assert [(i["id"], i["answers"]) for i in view["interrupts"]] == [
        ("g1:review:run", ["ok", "fail"])
    ]
    # The suggested command works as printed.
    suggested = next(line.strip() for line in out.splitlines() if "--trigger ok" in line)
    argv = cli_argv(*suggested.split()[1:])
    answered = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith("run g1 completed")


def test_approve_names_the_gates_it_cannot_answer_and_approve_with_answers_them(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    graph = str(GATES / "okfail.yaml")
    left = _cli(store, "run", graph, "--approve", "-q")
    assert left.returncode == 3
    assert (
        "phasegraph: --approve could not answer 1 gate (node review accepts ok, fail): "
        "add --approve-with TRIGGER" in left.stderr
    )
    done = _cli(store, "run", graph, "--approve-with", "ok", "-q")
    assert done.returncode == 0, done.stderr
    assert "completed: 2/2 nodes succeeded" in done.stdout
    assert "could not answer" not in done.stderr


def test_a_timed_out_review_keeps_its_id_and_a_reply_with_it_resumes_the_parked_run(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    started = _cli(store, "run", str(GATES / "spec_review.yaml"), "--run-id", "sr", "-q")
    assert started.returncode == 3, started.stderr
    assert "id sr:spec:spec_review" in started.stdout
    # The run stopped with the review open, its deadline 2 s on (with: {review_timeout: 2}):
    # far enough that the process that opened it stops first, however busy the machine.
    (review,) = json.loads(_cli(store, "status", "sr", "--json").stdout)["interrupts"]
    assert not review["parked"], "the run's own process fired the review's deadline"
    deadline = datetime.fromisoformat(review["deadline"])
    while (left := (deadline - datetime.now(UTC)).total_seconds()) >= 0:
        time.sleep(left + 0.01)
    # Nothing drives the run now: its status says the deadline passed and what fires it.
    shown = _cli(store, "status", "sr").stdout
    assert "times out at" not in shown
    assert "its deadline passed at " in shown
    assert "fires when a process next drives the run" in shown
    assert f"'phasegraph resume sr --store {store}'" in shown
    assert "--detach" not in shown  # no workers share a SQLite store
    parked = _cli(store, "resume", "sr", "-q")
    assert parked.returncode == 3
    assert parked.stdout.startswith("run sr parked")
    assert "id sr:spec:spec_review)" in parked.stdout
    assert "--reply" not in parked.stdout
    done = _cli(store, "reply", "sr", "--id", "sr:spec:spec_review", "--confirm", "-q")
    assert done.returncode == 0, done.stderr
    history = json.loads(_cli(store, "history", "sr", "--json").stdout)
    gate_events = [e for r in history for e in r["events"] if "spec_review" in e["kind"]]
    assert [(e["kind"], e.get("trigger")) for e in gate_events] == [
        ("spec_review_request", None),
        ("spec_review_reply", "timeout"),
        ("spec_review_request", None),
        ("spec_review_reply", "confirm"),
    ]
    assert {e["id"] for e in gate_events} == {"sr:spec:spec_review"}


def test_a_review_without_timeout_gets_thirty_minutes_and_cancel_closes_it(
    tmp_path: Path,
) -> None:
    graph = tmp_path / "review.yaml"
    text = (GATES / "spec_review.yaml").read_text(encoding="utf-8")
    graph.write_text(text.replace("with: {review_timeout: 2}", ""), encoding="utf-8")
    shutil.copy(GATES / "gate_actions.py", tmp_path)
    store = _store(tmp_path)
    assert _cli(store, "run", str(graph), "--run-id", "long", "-q").returncode == 3
    view = json.loads(_cli(store, "status", "long", "--json").stdout)
    (interrupt,) = view["interrupts"]
    waited = datetime.fromisoformat(interrupt["deadline"]) - datetime.fromisoformat(
        interrupt["created_at"]
    )
    assert waited.total_seconds() == 1800
    cancelled = _cli(store, "cancel", "long")
    closed = "run long cancelled; closed unanswered: long:spec:spec_review"
    assert cancelled.stdout.strip() == closed
    history = json.loads(_cli(store, "history", "long", "--json").stdout)
    closing = [e for e in history[-1]["events"] if e["kind"] == "spec_review_reply"]
    assert closing == [
        {
            "kind": "spec_review_reply",
            "id": "long:spec:spec_review",
            "trigger": None,
            "cancelled": True,
            "message": "closed unanswered: the run was cancelled (cancelled by request)",
        }
    ]


def test_check_refuses_a_review_timeout_that_run_refuses(tmp_path: Path) -> None:
    graph = tmp_path / "review.yaml"
    text = (GATES / "spec_review.yaml").read_text(encoding="utf-8")
    graph.write_text(text.replace("review_timeout: 2", "review_timeout: soon"), "utf-8")
    message = "nodes[0]: with.review_timeout must be a number of seconds >= 0, not 'soon'"
    checked = subprocess.run(
        cli_argv("check", str(graph)), capture_output=True, text=True, timeout=120, check=False
    )
    assert checked.returncode == 1
    assert message in checked.stdout
    ran = _cli(_store(tmp_path), "run", str(graph))
    assert ran.returncode == 2
    assert message in ran.stderr
