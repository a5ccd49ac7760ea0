"""``phasegraph test`` of a shipped graph, through the real command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ARGUMENTS = {
    "hello": ("--input", "who=ada"),
    "team_pipeline": ("--expect", "failed"),  # its migrate phase fails by design
}
"""What each graph's test needs beyond ``--approve`` (as benchmarks/test_under_load.py)."""


def passes_phasegraph_test(graph: str, folder: Path) -> None:
    """Every property holds, crash-equivalence included, run from an empty folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_", "OPENAI_"))}
    # The venv's commands on PATH, as for a user who activated it (mcp-server-git).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "phasegraph"), "test", "-q", graph, "--approve",
         *ARGUMENTS.get(graph, ())],
        cwd=folder, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      crash-equivalence" in done.stdout
    assert done.stdout.rstrip().endswith(" 0 fail")
