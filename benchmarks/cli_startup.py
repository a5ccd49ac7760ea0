"""Start-up time of the ``phasegraph`` console script against a bare Python start.

Run from the repository root, with phasegraph installed in the venv::

    .venv/bin/python benchmarks/cli_startup.py [--rounds 21]

Each round runs every command once, in the same order (round robin, so a burst of load
on a shared machine hits every row alike), after one unmeasured warm-up round. Prints
the median, min and max wall time of each command in milliseconds and its median divided
by the median of ``python -c "import json"``, the floor any Python command line pays.
The load average before and after is printed too: numbers taken under load are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = str(Path(sys.executable).with_name("phasegraph"))
BASELINE = "python -c 'import json'"
COMMANDS = {
    BASELINE: [sys.executable, "-c", "import json"],
    "phasegraph --version": [SCRIPT, "--version"],
    "phasegraph --help": [SCRIPT, "--help"],
    "phasegraph run --help": [SCRIPT, "run", "--help"],
    "phasegraph status --store memory://": [SCRIPT, "status", "--store", "memory://"],
}


def _once(argv: list[str]) -> float:
    """Wall time of one run in milliseconds; a failing command ends the benchmark."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = (time.perf_counter() - started) * 1e3
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="measured rounds (default 21)")
    args = parser.parse_args()
    if not Path(SCRIPT).exists():
        raise SystemExit(f"{SCRIPT} not found: install phasegraph in this venv first")
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    load_before = _load()
    for argv in COMMANDS.values():
        _once(argv)  # warm-up: file cache and .pyc files
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            times[name].append(_once(argv))
    base = statistics.median(times[BASELINE])
    print(f"{args.rounds} rounds; load average before {load_before}, after {_load()}")
    print(f"| {'command':<36} | median ms | min ms | max ms | x import json |")
    print(f"|{'-' * 38}|-----------|--------|--------|---------------|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name:<36} | {median:9.1f} | {min(values):6.1f} | {max(values):6.1f} "
            f"| {median / base:13.2f} |"
        )


if __name__ == "__main__":
    main()
