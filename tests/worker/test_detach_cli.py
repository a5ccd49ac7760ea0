"""``run``, ``reply`` and ``resume`` with ``--detach``, as a user types them, with a worker.

The real console script in subprocesses on a private redis-server: a detached run is
driven by the worker process, not by the command that created it, and ends as the same
run driven in one process would.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from test_workers import LOOP_GATE, reference, shape, workers

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.worker import work_queue_of

pytestmark = pytest.mark.redis


def cli(*args: str, marks: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if marks is not None:
        env["PHASEGRAPH_TEST_MARKS"] = str(marks)
    path = [str(LOOP_GATE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, env=env, timeout=60, check=False
    )


def status_of(store_url: str, run_id: str, wanted: str) -> dict[str, Any]:
    """Poll ``phasegraph status RUN --json`` until the run is ``wanted``."""
    deadline = time.monotonic() + 60
    while True:
        shown = cli("status", run_id, "--store", store_url, "--json")
        assert shown.returncode in (0, 1, 3), shown.stderr
        view: dict[str, Any] = json.loads(shown.stdout)
        if view["status"] == wanted:
            return view
        assert time.monotonic() < deadline, f"run {run_id} still {view['status']}"
        time.sleep(0.1)


def test_detached_run_is_driven_by_the_worker_and_answered_detached(
    store_url: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    expected = asyncio.run(reference(LOOP_GATE, {"n": 3}, "ok"))
    with workers(store_url, 1, marks) as (worker,):
        started = cli("run", str(LOOP_GATE), "--input", "n=3", "--detach", "--store", store_url)
        assert started.returncode == 0, started.stderr
        assert " queued for the workers at step " in started.stdout
        run_id = started.stdout.split()[1]
        assert f"phasegraph status {run_id} --store " in started.stdout

        waiting = status_of(store_url, run_id, "waiting")
        (interrupt,) = waiting["interrupts"]
        gate = interrupt["id"]
        answered = cli(
            "reply", run_id, "--id", gate, "--trigger", "ok", "--detach",
            "--store", store_url, "--json",
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout)["queued"] is True
        status_of(store_url, run_id, "completed")

        # Every action ran in the worker process, none in the commands that queued it.
        pids = {line.split()[-1] for line in marks.read_text().splitlines()}
        assert pids == {str(worker.pid)}
        again = cli("resume", run_id, "--detach", "--store", store_url)
        assert again.returncode == 2
        assert "completed" in again.stderr

    async def final() -> tuple[Any, ...]:
        async with open_store(store_url) as store:
            engine = Engine(store)
            state = await engine.get(run_id)
            return (state.status, dict(state.data), shape(await engine.history(run_id)))

    assert asyncio.run(final()) == expected


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_detach_without_a_shared_store_is_refused_before_anything_is_committed(
    store: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if store == "sqlite" else "memory://"
    refused = cli("run", str(LOOP_GATE), "--input", "n=1", "--detach", "--store", url)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr  # one line, no traceback
    assert "has no work queue (use --store redis://HOST:PORT/DB or postgresql://" in refused.stderr
    if store == "sqlite":
        listed = cli("status", "--store", url, "--json")
        assert json.loads(listed.stdout) == []


def test_detach_refuses_approve(store_url: str) -> None:
    refused = cli(
        "run", str(LOOP_GATE), "--input", "n=1", "--detach", "--approve", "--store", store_url
    )
    assert refused.returncode == 2
    assert "answer its gates with 'phasegraph reply'" in refused.stderr


def test_a_queued_run_is_shown_queued_not_abandoned(store_url: str) -> None:
    started = cli(
        "run", str(LOOP_GATE), "--input", "n=1", "--detach", "--store", store_url, "--run-id", "q1"
    )
    assert started.returncode == 0, started.stderr
    one = cli("status", "q1", "--store", store_url)
    assert one.stdout.startswith(
        "run q1 (loop_gate) running at step 0 (queued: the next free 'phasegraph worker' drives it)"
    )
    listed = cli("status", "--store", store_url)
    assert listed.stdout.split("\n")[0].split() == ["q1", "loop_gate", "queued", "step", "0"]
    assert "abandoned" not in listed.stdout


SIDE_GATE = LOOP_GATE.parent / "side_gate.yaml"


def _open_gate(store_url: str, run_id: str) -> str:
    """Wait until the run's gate is open while its loop still runs; the gate's id."""
    deadline = time.monotonic() + 60
    while True:
        view = json.loads(cli("status", run_id, "--store", store_url, "--json").stdout)
        if view["interrupts"] and view["status"] == "running":
            (gate,) = view["interrupts"]
            return str(gate["id"])
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def test_a_reply_to_a_run_a_worker_drives_is_applied_between_its_steps(
    store_url: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"  # the loop beside the gate counts until this exists
    with workers(store_url, 1, tmp_path / "marks.txt"):
        run = ("run", str(SIDE_GATE), "--input", "n=100000", "--input", "nap=0.02", "--detach")
        started = cli(*run, "--input", f"until={release}", "--store", store_url, "--run-id", "s1")
        assert started.returncode == 0, started.stderr
        gate = _open_gate(store_url, "s1")
        refused = cli("reply", "s1", "--id", gate, "--trigger", "nope", "--store", store_url)
        assert refused.returncode == 2
        assert "'nope'" in refused.stderr
        answered = cli("reply", "s1", "--id", gate, "--trigger", "ok", "--store", store_url)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith(f"reply to {gate} handed to the worker driving run s1")
        release.touch()
        status_of(store_url, "s1", "completed")

    async def history() -> list[Any]:
        async with open_store(store_url) as store:
            return await Engine(store).history("s1")

    records = asyncio.run(history())
    replies = [r.seq for r in records if r.kind == "reply"]
    counting = [r.seq for r in records if r.node == "count"]
    # Answered once, while the loop beside the gate was still counting.
    assert len(replies) == 1
    assert replies[0] < counting[-1]


def test_a_cancel_of_a_run_a_worker_drives_stops_it_there(store_url: str, tmp_path: Path) -> None:
    with workers(store_url, 1, tmp_path / "marks.txt") as (worker,):
        run = ("run", str(SIDE_GATE), "--input", "n=100000", "--input", "nap=0.05", "--detach")
        assert cli(*run, "--store", store_url, "--run-id", "c1").returncode == 0
        gate = _open_gate(store_url, "c1")
        cancelled = cli("cancel", "c1", "--reason", "enough", "--store", store_url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith("run c1 cancelled by the worker driving it")
        assert gate in cancelled.stdout  # the gate it closed unanswered
        view = status_of(store_url, "c1", "cancelled")
        assert all(node["status"] != "running" for node in view["nodes"].values())
        assert worker.poll() is None  # the worker goes on serving


def test_a_cancel_waits_for_a_lease_left_by_a_dead_holder_instead_of_being_dropped(
    store_url: str, tmp_path: Path
) -> None:
    """The worker finds the cancel request while a process that died still holds the lease
    (as a drive that lost its lease leaves it until it lapses): it waits, then cancels."""
    run = ("run", str(SIDE_GATE), "--input", "n=100000", "--input", "nap=0.05", "--detach")
    assert cli(*run, "--store", store_url, "--run-id", "c2").returncode == 0

    async def leave_a_lease_and_ask_for_a_cancel() -> None:
        async with open_store(store_url) as store:
            # Longer than the worker takes to start: it finds the request with the lease held.
            await store.acquire("c2", "a-process-that-died", 5.0)
            queue = work_queue_of(store)
            try:
                await queue.request_cancel("c2", "enough")
            finally:
                await queue.aclose()

    asyncio.run(leave_a_lease_and_ask_for_a_cancel())
    with workers(store_url, 1, tmp_path / "marks.txt"):
        view = status_of(store_url, "c2", "cancelled")
    assert "enough" in json.dumps(view)


def test_a_worker_on_a_store_without_a_queue_says_so_in_one_line(tmp_path: Path) -> None:
    # (A worker whose queue is away waits for it: tests/store/test_postgres_specific.py.)
    refused = cli("worker", "--store", f"sqlite:///{tmp_path}/runs.db")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr  # one line, no traceback
    assert refused.stderr.startswith("phasegraph: workers share runs through Redis or Postgres")


def _progress_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[")]


def test_follow_shows_a_detached_run_as_run_would_and_the_hint_stays_detached(
    store_url: str, tmp_path: Path
) -> None:
    # The same run driven in this terminal (to its gate) prints the lines to expect.
    here = cli("run", str(LOOP_GATE), "--input", "n=3", "--store", f"sqlite:///{tmp_path}/a.db")
    assert here.returncode == 3, here.stderr
    expected = _progress_lines(here.stderr)
    assert expected

    started = cli("run", str(LOOP_GATE), "--input", "n=3", "--detach", "--store", store_url)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LOOP_GATE.parent)])}
    follow = subprocess.Popen(
        cli_argv("status", run_id, "--follow", "--store", store_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert follow.stderr is not None
        opening = follow.stderr.readline()  # it reads the run before any worker exists
        assert opening.startswith(f"following run {run_id} (loop_gate) from step 0"), opening
        with workers(store_url, 1, tmp_path / "marks.txt"):
            out, err = follow.communicate(timeout=60)
            assert follow.returncode == 3, err  # waiting: as 'run' exits
            assert _progress_lines(err) == expected
            assert f"run {run_id} waiting" in out
            reply_hint = next(line for line in out.splitlines() if "phasegraph reply" in line)
            assert reply_hint.rstrip().endswith("--detach"), reply_hint
            shown = cli("status", run_id, "--store", store_url)
            assert "phasegraph reply" in shown.stdout
            assert all(
                line.rstrip().endswith("--detach")
                for line in shown.stdout.splitlines()
                if "phasegraph reply" in line
            )

            answered = cli(*shlex.split(reply_hint)[1:])
            assert answered.returncode == 0, answered.stderr
            ended = cli("status", run_id, "--follow", "--store", store_url)
            assert ended.returncode == 0, ended.stderr
            assert f"run {run_id} completed" in ended.stdout
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_follow_needs_a_run(store_url: str) -> None:
    refused = cli("status", "--follow", "--store", store_url)
    assert refused.returncode == 2
    assert "--follow follows one run" in refused.stderr
