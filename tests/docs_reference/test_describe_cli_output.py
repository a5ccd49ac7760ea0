"""``phasegraph machines [NAME]`` and ``phasegraph tools [NAME]`` through the real CLI."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from builders import cli_argv
from phasegraph.spec import load_machine
from phasegraph.spec._loader import builtin_machines


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_describing_a_machine_shows_its_parts_within_80_columns() -> None:
    done = _cli("machines", "team_phase")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert _widest(text) <= 80
    assert text.startswith("team_phase (machine)\n")
    machine = load_machine("team_phase")
    for heading in ("States", "Hooks", "Triggers", "Outcomes", "Budgets", "Settings", "Writes"):
        assert f"\n{heading}\n" in text
    for state in machine.states:
        assert f"\n  {state} " in text
    for transition in machine.transitions:
        assert f"\n  {transition.trigger} " in text
    assert "\n  attempts  limit 1; every entry into running spends one\n" in text
    assert "\n  validation_command  tested by guards of fail, error; read by" in text
    assert "phasegraph.concerns.team:checkpoint (fires saved)" in " ".join(text.split())


def test_the_machine_list_wraps_one_sentence_per_machine() -> None:
    done = _cli("machines")
    assert done.returncode == 0, done.stderr
    assert _widest(done.stdout) <= 80
    starts = [line.split()[0] for line in done.stdout.splitlines() if line and line[0] != " "]
    assert starts[: len(builtin_machines())] == builtin_machines()
    assert done.stdout.rstrip().endswith("phasegraph machines NAME describes one.")


def test_the_machine_list_in_json_keeps_whole_descriptions() -> None:
    done = _cli("machines", "--json")
    listed = json.loads(done.stdout)
    assert [row["name"] for row in listed] == builtin_machines()
    assert listed[0]["description"] == load_machine(builtin_machines()[0]).description


def test_describing_a_machine_in_json_gives_its_sections() -> None:
    done = _cli("machines", "loop", "--json")
    shown = json.loads(done.stdout)
    assert (shown["name"], shown["kind"]) == ("loop", "machine")
    budgets = next(s for s in shown["sections"] if s["title"] == "Budgets")
    assert budgets["entries"] == [
        {"term": "steps", "text": "limit 1000; every entry into work spends one"}
    ]


def test_a_machine_file_of_ones_own_is_described_too(tmp_path: Path) -> None:
    word = "x" * 120  # no line may pass the width, not even for a word longer than it
    (tmp_path / "mine.yaml").write_text(
        "machine: mine\n"
        f"description: A machine of one's own. {word}\n"
        "initial: work\n"
        "states:\n"
        "  work: {hook: work, description: do it}\n"
        "  done: {final: success}\n"
        "transitions:\n"
        "  - {trigger: finish, source: work, dest: done}\n",
        encoding="utf-8",
    )
    done = _cli("machines", "./mine.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _widest(done.stdout) <= 80
    assert "\n  finish  work -> done\n" in done.stdout
    assert "\n  success  ends in done\n" in done.stdout


def test_an_unknown_machine_or_tool_is_one_line_naming_the_known_ones() -> None:
    for args, known in ((("machines", "tsak"), "task"), (("tools", "read_fil"), "read_file")):
        done = _cli(*args)
        assert done.returncode == 2
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert known in done.stderr
        assert "Traceback" not in done.stderr


def test_the_tools_are_described_with_arguments_effects_and_rules() -> None:
    done = _cli("tools")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert _widest(text) <= 80
    for name in ("advance", "list_files", "read_file", "run_command", "write_file"):
        assert f"{name} (tool)\n" in text
    run_command = text.split("run_command (tool)\n", 1)[1].split(" (tool)\n", 1)[0]
    assert "\n  argv     array of string, required\n" in run_command
    assert "\n  once  it must not happen twice" in run_command
    assert "with.phases.PHASE.allow_commands" in run_command
    assert "argv, exit, stdout, stderr, timed_out" in run_command


def test_one_tool_is_described_alone() -> None:
    done = _cli("tools", "write_file")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("write_file (tool)\n")
    assert "(tool)" not in done.stdout.split("\n", 1)[1]
    assert "\n  idempotent  " in done.stdout


def test_a_terminal_gets_lines_as_wide_as_it_is() -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        cli_argv("machines", "agent"), stdout=follower, stderr=subprocess.DEVNULL, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=120) == 0
    os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    assert "agent (machine)" in text
    assert _widest(text) <= 60
    assert _widest(text) > 50  # wrapped to the terminal, not to a narrower default


_PROBE = """
import sys
from phasegraph.cli import main
code = main(sys.argv[1:])
print("--- modules ---", code, *sorted(sys.modules), sep="\\n")
"""


def test_the_machine_list_loads_neither_the_tools_nor_the_describer() -> None:
    # What a module-level import would drag into the list, whatever the clock says: the
    # list reads the machines' YAML, not the tools, the concern actions or the analysis
    # that describing one (or checking it) needs.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "machines"], capture_output=True, text=True, timeout=120
    )
    listing, modules = done.stdout.split("--- modules ---\n")
    code, *names = modules.split()
    assert code == "0", done.stderr
    assert "task " in listing
    for heavy in ("phasegraph.tools", "phasegraph.concerns", "phasegraph.analysis"):
        assert heavy not in names
    assert "phasegraph.cli._describe" not in names
