"""What the guides tell a newcomer holds: the Python API example runs as shown, a graph's
own module beside it is found, and ``history --to`` stops before the seq it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from builders import TESTS, cli_argv

REPO = TESTS.parent
GUIDES = REPO / "docs" / "guides"


def _block(page: str, section: str, fence: str) -> str:
    text = (GUIDES / page).read_text(encoding="utf-8")
    return text.split(section, 1)[1].split(f"```{fence}\n", 1)[1].split("```", 1)[0]


def test_the_python_api_example_runs_as_shown(tmp_path: Path) -> None:
    graph = _block("server-and-viewer.md", "## HTTP API", "yaml")
    (tmp_path / "review.yaml").write_text(graph, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _block("python-api.md", "## Python API", "python")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "completed {'greeting': 'hello, ada', 'letters': 8}"
    assert lines[1:3] == ["0 created None None", "1 start plan None"]


def test_a_python_action_beside_the_graph_is_found_and_history_to_excludes_its_seq(
    tmp_path: Path,
) -> None:
    beside = TESTS / "fixtures" / "failures" / "fails.yaml"  # failing.py sits beside it
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    ran = subprocess.run(
        cli_argv("run", str(beside), "--run-id", "b", "--store", store, "-q"),
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    # Run from elsewhere: `failing:lookup` is found in failing.py beside the graph file.
    assert "boom (run): KeyError: 'missing_key'" in ran.stdout
    shown = subprocess.run(
        cli_argv("history", "b", "--from", "1", "--to", "3", "--store", store, "--json"),
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert [r["seq"] for r in json.loads(shown.stdout)] == [1, 2]
    command_line = (GUIDES / "command-line.md").read_text(encoding="utf-8")
    assert "from `--from` up to but not including `--to`" in command_line
