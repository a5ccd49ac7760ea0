"""Numbers a person types: each one the command line cannot take is one clear error.

Through the real command line in a subprocess. An integer of more than 4,300 digits
cannot even be converted from text (Python's limit), one past 64 bits cannot be stored,
and a negative step number names no step: each used to end in a traceback, or in a
message that blamed the store, or that repeated every digit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders import cli_argv
from phasegraph import Engine, open_store

HUGE = "9" * 5000
TOO_LONG = (
    "a number of 5000 digits: phasegraph reads integers of at most 4300 digits; write it as "
    "a string to pass it as text"
)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "hello", "--input", f"who={HUGE}"], f"phasegraph: who=…: {TOO_LONG} (who="),
        (["run", "hello", "--input", f"who=[1, {HUGE}]"], f"phasegraph: who=…: {TOO_LONG}"),
        (["run", "hello", "--input-file", "input.json"], f"--input-file input.json: {TOO_LONG}"),
        (
            ["run", "hello", "--input", "extra=99999999999999999999"],
            "phasegraph: the value of key 'extra' cannot be encoded: at ['extra']: an int is "
            "outside the 64-bit range",
        ),
        (["status", "--limit", "9" * 30], "argument --limit: expected a whole number >= 1"),
        (["serve", "--port", "99999"], "argument --port: expected a port number from 0 to 65535"),
        (["worker", "--reclaim-after", "inf"], "expected a positive number of seconds, not 'inf'"),
    ],
)
def test_a_number_the_command_cannot_take_is_one_error(
    tmp_path: Path, args: list[str], said: str
) -> None:
    (tmp_path / "input.json").write_text(f'{{"who": {HUGE}}}', encoding="utf-8")
    done = _cli(tmp_path, *args, "--store", f"sqlite:///{tmp_path / 'runs.db'}")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert said in done.stderr
    assert HUGE not in done.stderr  # the digits are not repeated back


@pytest.mark.parametrize(
    "args",
    [
        ["history", "--from", "-1"],
        ["history", "--to", "-5"],
        ["history", "--from", HUGE],
        ["show", "--at", "9" * 30],
        ["fork", "--at", HUGE],
    ],
)
async def test_a_step_number_is_a_whole_number_the_store_can_hold(
    tmp_path: Path, args: list[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(store) as opened:
        run_id = (await Engine(opened).run("hello", {"who": "you"})).run_id
    done = _cli(tmp_path, args[0], run_id, *args[1:], "--store", store)
    assert done.returncode == 2, done.stderr
    option = args[1]
    assert f"argument {option}: expected a step number (a whole number >= 0), not '" in done.stderr
    assert "Traceback" not in done.stderr
    assert HUGE not in done.stderr
