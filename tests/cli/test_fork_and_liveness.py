"""``fork`` drives the new run (or only creates it with ``--no-run``); ``status`` tells an
abandoned run from one a live process drives and from one not started yet, and says how to
resume it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from builders import TESTS, cli_argv

GATES = TESTS / "fixtures" / "gates"


def _cli(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", store)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_fork_drives_the_new_run_and_no_run_leaves_it_to_resume(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _cli(store, "run", "hello", "--run-id", "base", "-q").returncode == 0
    forked = _cli(store, "fork", "base", "--at", "2", "--set", 'greeting="hi, fork"', "-q")
    assert forked.returncode == 0, forked.stderr
    result = "completed: 4/4 nodes succeeded\n  message: hi, fork! (6 letters)\n"
    assert forked.stdout.endswith(result)

    created = _cli(store, "fork", "base", "--at", "2", "--no-run")
    assert created.returncode == 0
    new_id = created.stdout.strip()  # the id alone, for NEW=$(phasegraph fork ...)
    one = _cli(store, "status", new_id)
    assert one.stdout.startswith(
        f"run {new_id} (hello) running at step 0 (not started: created, and no process has "
        f"driven it yet; drive it with 'phasegraph resume {new_id} --store {store}')"
    )
    listing = _cli(store, "status").stdout
    assert f"{new_id:<28} hello                not started step 0" in listing
    assert f"drive one with 'phasegraph resume {new_id} --store {store}'" in listing
    assert "abandoned" not in listing
    resumed = _cli(store, "resume", new_id, "-q")
    assert resumed.returncode == 0
    assert resumed.stdout == (
        f"run {new_id} completed: 4/4 nodes succeeded\n  message: hello, world! (10 letters)\n"
    )


def _driving(store: str, run_id: str, folder: Path, release: Path) -> subprocess.Popen[bytes]:
    """``phasegraph run`` of the blocking graph, once its action has started (it waits
    until ``release`` exists)."""
    started = folder / "started"
    env = {
        **os.environ,
        "PHASEGRAPH_TEST_STARTED": str(started),
        "PHASEGRAPH_TEST_RELEASE": str(release),
    }
    argv = cli_argv("run", str(GATES / "blocking.yaml"), "--run-id", run_id, "--store", store)
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    while not started.exists():
        if driver.poll() is not None:
            pytest.fail(driver.communicate()[1].decode())
        time.sleep(0.01)
    return driver


def test_status_says_a_live_run_is_driven(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    release = tmp_path / "release"
    driver = _driving(store, "live", tmp_path, release)
    try:
        shown = _cli(store, "status", "live").stdout
        listing = _cli(store, "status").stdout
    finally:
        release.touch()
        driver.communicate(timeout=120)
    # Named by its holder: this machine's name and the driving process's pid.
    assert shown.startswith(
        f"run live (blocking) running at step 1 (a live process drives it: "
        f"'{socket.gethostname()}:{driver.pid}')"
    )
    assert "abandoned" not in listing
    assert driver.returncode == 0


def test_status_says_a_run_whose_driver_died_is_abandoned(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    driver = _driving(store, "gone", tmp_path, tmp_path / "never")
    driver.kill()  # SIGKILL: its lease stays, held by a process that is gone
    driver.communicate(timeout=120)
    shown = _cli(store, "status", "gone").stdout
    assert shown.startswith(
        "run gone (blocking) running at step 1 (abandoned: no live process drives it; "
        f"continue it with 'phasegraph resume gone --store {store}')"
    )
    listing = _cli(store, "status").stdout
    assert f"{'gone':<28} blocking             abandoned   step 1" in listing
    assert f"continue one with 'phasegraph resume gone --store {store}'" in listing
