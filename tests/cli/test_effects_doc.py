"""``docs/effects.md``'s walkthrough holds: its commands run as shown and print what it shows.

The "Try it" section's files are written as the page gives them, and each ``$`` command
of its console blocks runs in a shell in that folder (the real ``phasegraph`` command,
its default store under the folder); every line the page shows under a command is in
what that command printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from builders import TESTS

PAGE = (TESTS.parent / "docs" / "effects.md").read_text(encoding="utf-8")
TRY_IT = PAGE.split("## Try it", 1)[1].split("\n## ", 1)[0]


def _blocks(fence: str) -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```", TRY_IT, flags=re.M | re.S)


def _session(block: str) -> list[tuple[str, list[str]]]:
    """Each ``$`` command of a console block with the lines shown under it."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line.strip())
    return steps


def _replay(block: str, folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for command, shown in _session(block):
        done = subprocess.run(
            ["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        printed = done.stdout + done.stderr
        missing = [line for line in shown if line not in printed]
        assert missing == [], f"$ {command}\nprinted:\n{printed}"


def test_the_walkthrough_runs_as_shown(tmp_path: Path) -> None:
    graph, policy = _blocks("yaml")
    [reconciler] = _blocks("python")
    asked, reconciled = _blocks("console")
    (tmp_path / "pay.yaml").write_text(graph, encoding="utf-8")
    _replay(asked, tmp_path)

    (tmp_path / "payments.py").write_text(reconciler, encoding="utf-8")
    ask = "        on_unknown: ask\n"
    assert ask in graph
    (tmp_path / "pay.yaml").write_text(graph.replace(ask, policy), encoding="utf-8")
    _replay(reconciled, tmp_path)
    lines = (tmp_path / "payments.log").read_text(encoding="utf-8").splitlines()
    assert lines == ["paid demo2:pay:0"]  # the reconciler found it: not paid again
