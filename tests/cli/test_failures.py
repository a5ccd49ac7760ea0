"""Failures say enough to act on, in the text a person reads from ``run``, ``status`` and
``errors`` (the real command line, in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from builders import TESTS, cli_argv

FAILS = TESTS / "fixtures" / "failures" / "fails.yaml"

PYTHON = "KeyError: 'missing_key' (raised at failing.py:6 in lookup)"
SHELL = (
    "finished with outcome failed (trigger 'fail'); command 'sh' exited with status 3; "
    "stderr: fatal: no such ref"
)
TIMED_OUT = (
    "finished with outcome failed (trigger 'fail'); command 'sleep' was stopped at its timeout"
)
TOOL = "cannot start 'no-such-tool-xyz': no program of that name on PATH (is it installed?)"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--store", f"sqlite:///{tmp_path / 'runs.db'}")
    # Run beside the fixture, so the raising frame is shown relative to it.
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, cwd=FAILS.parent
    )


def test_run_status_and_errors_show_type_place_exit_status_and_stderr(tmp_path: Path) -> None:
    ran = _cli(tmp_path, "run", str(FAILS), "--run-id", "f", "-q")
    assert ran.returncode == 1
    assert f"  slow (failed): {TIMED_OUT}" in ran.stdout
    assert f"  boom (run): {PYTHON}\n" in ran.stdout
    assert f"  sh (failed): {SHELL}\n" in ran.stdout
    assert f"  tool (run): {TOOL}" in ran.stdout
    status = _cli(tmp_path, "status", "f").stdout
    assert f"({PYTHON})" in status
    assert f"failed  ({SHELL})" in status
    assert TOOL in status
    errors = _cli(tmp_path, "errors", "f").stdout
    for message in (PYTHON, SHELL, TIMED_OUT, TOOL):
        assert f"\n    {message}" in errors
    # Resuming the failed run names what retries it; nothing says it is resuming.
    resumed = _cli(tmp_path, "resume", "f")
    assert resumed.returncode == 2
    assert resumed.stdout == ""
    assert resumed.stderr == (
        "phasegraph: run 'f' already failed; nothing to resume. To try again, fork it from "
        "a step before it ended: 'phasegraph fork f --at SEQ' (its history shows each "
        "step's SEQ: 'phasegraph history f')\n"
    )


def test_coding_task_without_pytest_says_pytest_is_missing(tmp_path: Path) -> None:
    # A Python in which pytest cannot be found (find_spec sees the blocked entry).
    argv = [
        sys.executable,
        "-c",
        "import sys; sys.modules['pytest'] = None; "
        "from phasegraph.cli._main import main; raise SystemExit(main())",
        "run", "coding_task", "--approve", "-q", "--store", f"sqlite:///{tmp_path / 'runs.db'}",
        "--input", f"workdir={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert (
        "  workspace (run): this example verifies its work with pytest, which is not installed "
        f"for {sys.executable}: install it ({sys.executable} -m pip install pytest)"
    ) in done.stdout
    assert "Switch to another model" not in done.stdout
