"""`phasegraph test` of every shipped graph and documented example, N times, every core busy.

Run from the repository root, with phasegraph installed in the venv::

    .venv/bin/python benchmarks/test_under_load.py [--rounds 10] [--only NAME,...]

A ``phasegraph test`` that passes only on a quiet machine reports a correct graph as
broken: this runs it on each target -- the README's agent example, the tutorial's
examples (``docs/tutorial``) and every graph in ``graphs/`` -- ``--rounds`` times, round
robin, while one spinning process per core keeps every core busy (``--spinners`` to
change how many). Each run is the real command line in a fresh folder holding the
page's files, as a reader would have them. Prints a table of passes and failures per
target, with the median time of a run and the 1-minute load average sampled after each
round, the output of every failed run, and exits 1 on any failure. Not part of the
test suite (it takes minutes); ``tests/`` runs each target once.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "docs"))
from doc_kit import blocks  # noqa: E402  (the docs tests' reading of a page's blocks)

SCRIPT = str(Path(sys.executable).with_name("phasegraph"))
TUTORIAL = REPO / "docs" / "tutorial"
GRAPH_ARGUMENTS = {
    "hello": ("--input", "who=ada"),
    "team_pipeline": ("--expect", "failed"),  # its migrate phase fails by design
}


@dataclass(frozen=True)
class Target:
    """One ``phasegraph test`` command, and the pages whose ``file:`` blocks it needs."""

    name: str
    argv: tuple[str, ...]
    pages: tuple[tuple[Path, frozenset[str] | None], ...] = ()

    def prepare(self, folder: Path) -> None:
        """Write the files the command reads, as the pages give them (first page wins)."""
        for page, names in self.pages:
            for block in blocks(page):
                if block.marker != "file" or (names is not None and block.argument not in names):
                    continue
                path = folder / block.argument
                if not path.exists():
                    path.write_text(block.text, encoding="utf-8")


@dataclass
class Tally:
    """What the rounds of one target gave."""

    passed: int = 0
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def targets() -> list[Target]:
    """The README's agent example, the tutorial's examples, every shipped graph."""
    agent = TUTORIAL / "agent.md"
    found = [
        Target(
            "README: notes.yaml",
            ("notes.yaml", "--input", "topic=phasegraph", "--approve"),
            ((REPO / "README.md", frozenset({"notes.yaml"})), (agent, None)),
        ),
        Target(
            "tutorial: notes.yaml",
            ("notes.yaml", "--input", "topic=phasegraph", "--approve"),
            ((agent, None),),
        ),
        Target(
            "tutorial: greet.yaml",
            ("greet.yaml", "--input", "who=ada"),
            ((TUTORIAL / "first-graph.md", None),),
        ),
        Target(
            "tutorial: team_plan plan.json",
            ("team_plan", "--input-file", "plan.json"),
            ((TUTORIAL / "team-plan.md", None),),
        ),
    ]
    for graph in sorted((REPO / "graphs").glob("*.yaml")):
        extra = GRAPH_ARGUMENTS.get(graph.stem, ())
        found.append(Target(f"graph: {graph.stem}", (graph.stem, "--approve", *extra)))
    return found


def _spin() -> None:
    while True:
        pass


def _once(target: Target) -> tuple[bool, float, str]:
    with tempfile.TemporaryDirectory(prefix="pg-under-load-") as scratch:
        folder = Path(scratch)
        target.prepare(folder)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_", "OPENAI_"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        started = time.perf_counter()
        done = subprocess.run(
            [SCRIPT, "test", "-q", *target.argv], cwd=folder, env=env,
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
    return done.returncode == 0, elapsed, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="runs of each target (10)")
    parser.add_argument(
        "--spinners", type=int, default=os.cpu_count() or 1,
        help="busy processes kept spinning (default: one per core)",
    )  # fmt: skip
    parser.add_argument("--only", default="", help="comma-separated substrings of target names")
    args = parser.parse_args()
    if not Path(SCRIPT).exists():
        raise SystemExit(f"{SCRIPT} not found: install phasegraph in this venv first")
    wanted = [part for part in args.only.split(",") if part]
    chosen = [t for t in targets() if not wanted or any(part in t.name for part in wanted)]
    tallies = {t.name: Tally() for t in chosen}
    loads: list[float] = []
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.spinners)]
    for spinner in spinners:
        spinner.start()
    try:
        for round_ in range(1, args.rounds + 1):
            for target in chosen:
                ok, elapsed, output = _once(target)
                tally = tallies[target.name]
                tally.seconds.append(elapsed)
                if ok:
                    tally.passed += 1
                else:
                    tally.failures.append(output)
                verdict = "ok" if ok else "FAILED"
                print(f"round {round_}: {target.name}: {verdict} ({elapsed:.1f} s)", flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()
    print(f"\n{args.rounds} rounds, {args.spinners} spinning processes on {os.cpu_count()} cores")
    print(f"1-minute load average after each round: {', '.join(f'{x:.2f}' for x in loads)}")
    print("\n| target | passed | failed | median s |\n| --- | --- | --- | --- |")
    for name, tally in tallies.items():
        median = statistics.median(tally.seconds)
        print(f"| {name} | {tally.passed} | {len(tally.failures)} | {median:.1f} |")
    failed = {name: t.failures for name, t in tallies.items() if t.failures}
    for name, outputs in failed.items():
        for output in outputs:
            print(f"\n--- {name} failed:\n{output}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
