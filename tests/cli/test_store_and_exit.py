"""Where runs are looked for, the run-id rule, and exit codes as the README states them,
through the real command line in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from builders import TESTS, cli_argv, sqlite_db
from phasegraph import open_store
from phasegraph.errors import LeaseHeldError
from phasegraph.run import RUN_ID_PATTERN

GATES = TESTS / "fixtures" / "gates"


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
        env=env,
    )  # fmt: skip


def test_read_only_commands_name_the_store_and_never_create_it(tmp_path: Path) -> None:
    for command in (["status", "r1"], ["errors", "r1"]):
        done = _cli(*command, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr == (
            "phasegraph: no run 'r1': the store does not exist (looked in "
            f"sqlite:///.phasegraph/runs.db, the file {tmp_path}/.phasegraph/runs.db; "
            "--store URL or PHASEGRAPH_STORE names another store)\n"
        )
    listing = _cli("status", cwd=tmp_path)
    assert listing.returncode == 0
    assert listing.stdout == f"no runs: there is no store at {tmp_path}/.phasegraph/runs.db (yet)\n"
    assert list(tmp_path.iterdir()) == []  # nothing was created
    # A store that exists but lacks the run: the message names it too.
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _cli("run", "hello", "--store", store, "-q").returncode == 0
    missing = _cli("show", "nope", "--store", store)
    assert missing.returncode == 2
    assert f"looked in {store}, the file {tmp_path / 'runs.db'}" in missing.stderr


def test_run_ids_follow_the_servers_rule(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    for run_id in ("a b", "x" * 129):
        assert not RUN_ID_PATTERN.fullmatch(run_id)
        done = _cli("run", "hello", "--run-id", run_id, "--store", store, "-q")
        assert done.returncode == 2
        assert done.stderr.startswith(f"phasegraph: run id {run_id!r} is not allowed: use 1 to 128")
    accepted = _cli("run", "hello", "--run-id", "a.b_c-1", "--store", store, "-q")
    assert accepted.returncode == 0


def test_bad_input_exits_2_and_commits_nothing(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _cli("run", "hello", "--run-id", "dup", "--store", store, "-q").returncode == 0
    again = _cli("run", "hello", "--run-id", "dup", "--store", store, "-q")
    assert again.returncode == 2
    assert "run id 'dup' is taken" in again.stderr
    assert json.loads(_cli("status", "dup", "--store", store, "--json").stdout)["seq"] == 8

    gate = str(GATES / "okfail.yaml")
    assert _cli("run", gate, "--run-id", "w", "--store", store).returncode == 3
    illegal = _cli("reply", "w", "--id", "w:review:run", "--trigger", "confirm", "--store", store)
    assert illegal.returncode == 2
    assert "trigger 'confirm' is not legal in state 'run' (legal triggers: fail, ok)" in (
        illegal.stderr
    )
    after = json.loads(_cli("status", "w", "--store", store, "--json").stdout)
    assert (after["status"], after["seq"]) == ("waiting", 4)

    foreign = tmp_path / "foreign.db"
    foreign.write_text("not a database", encoding="utf-8")
    done = _cli("status", "--store", f"sqlite:///{foreign}")
    assert done.returncode == 2
    assert "is not a phasegraph run store" in done.stderr
    with sqlite_db(tmp_path / "runs.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    newer = _cli("status", "--store", store)
    assert newer.returncode == 2
    assert "newer" in newer.stderr


def _steal(store_url: str, run_id: str) -> None:
    """Take the run's lease as soon as it lapses (its holder is stopped: nothing renews it)."""

    async def take() -> None:
        async with open_store(store_url) as store:
            async with asyncio.timeout(60):
                while True:
                    try:
                        await store.acquire(run_id, "thief", 60)
                        return
                    except LeaseHeldError:
                        await asyncio.sleep(0.02)

    asyncio.run(take())


def test_a_run_taken_over_while_its_process_stalled_exits_4_naming_the_taker(
    tmp_path: Path,
) -> None:
    """The whole driver process stops (SIGSTOP: its lease keeper too), another process
    takes the lapsed lease, and the driver goes on: its step is refused, and it exits 4
    saying it stalled, who took the run, and how to see the run where it is now."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    started, release = tmp_path / "started", tmp_path / "release"
    env = {
        **os.environ,
        "PHASEGRAPH_LEASE_TTL": "0.5",
        "PHASEGRAPH_TEST_STARTED": str(started),
        "PHASEGRAPH_TEST_RELEASE": str(release),
    }
    argv = cli_argv("run", str(GATES / "blocking.yaml"), "--run-id", "held", "--store", store)
    driver = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        while not started.exists():  # the action now blocks the driver's event loop
            if driver.poll() is not None:
                pytest.fail(driver.communicate()[1])
            time.sleep(0.01)
        os.kill(driver.pid, signal.SIGSTOP)
        try:
            _steal(store, "held")
        finally:
            os.kill(driver.pid, signal.SIGCONT)
        release.touch()
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 4, err
    assert "without renewing its lease of 0.5 s (it stalled), and 'thief' took the run over" in err
    assert err.rstrip().endswith(f"where it is now: 'phasegraph status held --store {store}'")
    assert "Traceback" not in err
