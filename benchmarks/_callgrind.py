"""What the instruction-counting benchmarks share: another checkout's package, callgrind's count.

``python benchmarks/NAME.py`` puts this folder first on ``sys.path``, so the scripts import
it by name.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def with_checkout(env: Mapping[str, str], root: Path | None, folder: Path) -> dict[str, str]:
    """``env`` with ``root``'s ``engine/`` imported as ``phasegraph`` (``None``: this tree's).

    The link is made in ``folder``, which must outlive the processes given the result.
    """
    env = dict(env)
    if root is not None:
        link = folder / "src"
        link.mkdir(exist_ok=True)
        if not (link / "phasegraph").exists():
            (link / "phasegraph").symlink_to(root.resolve() / "engine")
        env["PYTHONPATH"] = str(link)
    return env


def instructions(argv: Sequence[str], env: Mapping[str, str], folder: Path) -> int:
    """Instructions ``python ARGV`` executes under callgrind (its ``summary`` line)."""
    out = folder / "cg.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *argv],
        env=dict(env),
        check=True,
        capture_output=True,
    )
    match = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no summary in callgrind's output for {' '.join(argv)}")
    return int(match.group(1))
