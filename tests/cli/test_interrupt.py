"""Runs that stop early, through the real command line in a subprocess: an action that
cancels the run, and Ctrl-C (SIGINT) while an action is in flight."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from builders import TESTS, cli_argv
from phasegraph import Engine, open_store
from phasegraph.errors import RunNotFoundError

FIXTURES = TESTS / "fixtures" / "interrupt"


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    # A generous bound, only so that a broken run fails the test instead of hanging it.
    deadline = time.monotonic() + 60
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _with_ctrl_c(argv: list[str]) -> list[str]:
    """``argv`` started with SIGINT's default action, as a terminal's foreground job has it.

    A process a shell without job control starts in the background ignores SIGINT, and
    so does everything it starts (Python keeps an ignored SIGINT ignored): a test suite
    run that way would wait in vain for the command to stop.
    """
    restore = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    return [sys.executable, "-c", restore + "os.execv(sys.argv[1], sys.argv[1:])", *argv]


def _head(store_url: str, run_id: str) -> int:
    async def read() -> int:
        async with open_store(store_url) as store:
            return (await Engine(store).get(run_id)).seq

    try:
        return asyncio.run(read())
    except RunNotFoundError:
        return -1


def _status(store_url: str, run_id: str) -> str:
    argv = cli_argv("status", run_id, "--store", store_url, "--json")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return str(json.loads(done.stdout)["status"])


def test_an_action_that_cancels_the_run_ends_it_cancelled_in_one_line(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    argv = cli_argv(
        "run", str(FIXTURES / "cancel.yaml"), "--store", store_url, "--run-id", "r-cancel", "-q",
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1  # the README: 1 run failed or cancelled
    assert done.stdout.splitlines() == ["run r-cancel cancelled: 0/1 nodes succeeded, 1 cancelled"]
    assert "Traceback" not in done.stderr
    assert _status(store_url, "r-cancel") == "cancelled"


def test_ctrl_c_stops_the_run_with_its_resume_command_and_resume_completes_it(
    tmp_path: Path,
) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = "r-" + uuid.uuid4().hex[:8]
    started, holdfile = tmp_path / "started", tmp_path / "hold"
    holdfile.touch()
    argv = cli_argv(
        "run", str(FIXTURES / "hold.yaml"), "--store", store_url, "--run-id", run_id, "-q",
        "--input", f"started={started}", "--input", f"holdfile={holdfile}",
    )  # fmt: skip
    process = subprocess.Popen(
        _with_ctrl_c(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lambda: _head(store_url, run_id) >= 1, "the run's first step")
        _wait_for(started.exists, "the action to start")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert f"phasegraph resume {run_id} --store {store_url}" in stderr
    assert "Traceback" not in stderr
    assert stdout == ""
    assert _status(store_url, run_id) == "running"  # nothing was committed for the interrupt

    holdfile.unlink()
    resumed = subprocess.run(
        cli_argv("resume", run_id, "--store", store_url, "-q"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert _status(store_url, run_id) == "completed"
