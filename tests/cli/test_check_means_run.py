"""``check`` refuses what ``run`` refuses: the same graph, the real command, both ways.

An ``llm:`` binding offering a tool nobody provides used to pass ``check --strict`` and
fail at the first model turn; a nested setting of the wrong shape used to pass and fail
(or silently switch recovery off) at run time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders import cli_argv

_UNKNOWN_TOOL = """
graph: g
nodes:
  - id: agent
    machine: agent
    with: {workspace: "."}
    bind:
      think: {llm: {model: scripted, tools: [read_file, reed_file]}}
      act: {tools: conversation}
"""

_WRONG_SHAPE = """
graph: g
nodes:
  - id: chain
    machine: fallback_chain
    with: {suggestions: [try again], recovery: {retries: 3}}
    bind:
      main: {shell: "false"}
      recover: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}
      emergency: {python: "phasegraph.concerns.fallback:emergency", triggers: [fail]}
"""


def _phasegraph(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (_UNKNOWN_TOOL, "offers unknown tool 'reed_file'"),
        (_UNKNOWN_TOOL, "did you mean 'read_file'"),
        (_WRONG_SHAPE, "with.suggestions must be a mapping"),
        (_WRONG_SHAPE, "with.recovery has no enabled"),
    ],
)
def test_check_and_run_refuse_the_same_graph(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "g.yaml").write_text(text)

    checked = _phasegraph(tmp_path, "check", "--strict", "g.yaml")
    ran = _phasegraph(tmp_path, "run", "g.yaml", "--run-id", "r")

    assert checked.returncode == 1
    assert said in checked.stdout
    assert ran.returncode != 0
    assert said in ran.stderr
