"""Reads as fast as writes: ``Engine.get`` of a run's head and ``phasegraph history --json``.

Run from the repository root::

    .venv/bin/python benchmarks/read_bench.py [--steps 10000] [--gets 500] [--cli 7]
        [--redis URL]

Builds one ``--steps``-step run of ``loop.yaml`` per store (outside the clock), then
prints:

* **get** — the median of ``--gets`` calls of ``Engine.get(run_id)`` (the head: its
  snapshot plus the records since, up to 64 of them on this loop), in milliseconds, and
  how many records that read applies;
* **history --json** (SQLite only) — ``--cli`` runs of the console script
  ``phasegraph history RUN --json`` in a subprocess, output to ``/dev/null``: the median
  wall time and the median CPU time (user + system, from ``getrusage``) in seconds,
  interpreter start-up and imports included. Wall time on a loaded machine mostly
  measures the load; CPU time less so.

To compare two revisions, run this script from each in turn, several rounds, and take the
medians of the rounds (``PYTHONPATH`` may point an installed environment at another
checkout's package, with ``phasegraph`` linked to its ``engine/``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phasegraph import Engine, open_store

HERE = Path(__file__).parent
GRAPH = HERE / "loop.yaml"


async def _build(url: str, steps: int) -> str:
    async with open_store(url) as store:
        engine = Engine(store)
        state = await engine.run(engine.prepare(GRAPH), {"steps": steps})
        if str(state.status) != "completed":
            raise SystemExit(f"benchmark run did not complete: {state.status}")
        return state.run_id


async def _gets(url: str, run_id: str, count: int) -> tuple[float, int]:
    async with open_store(url) as store:
        engine = Engine(store)
        stored = await store.read(run_id)
        await engine.get(run_id)  # warm: connect, first decode
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            await engine.get(run_id)
            samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3, len(stored.records)


def _cli(url: str, run_id: str, rounds: int) -> tuple[float, float]:
    script = str(Path(sys.executable).with_name("phasegraph"))
    argv = [script, "history", run_id, "--json", "--store", url]
    walls, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=os.environ.copy())
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--gets", type=int, default=500)
    parser.add_argument("--cli", type=int, default=7)
    parser.add_argument("--redis", default=None, help="also measure this redis:// URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{tmp}/bench.db"}
        if args.redis:
            urls["redis"] = args.redis
        for name, url in urls.items():
            run_id = asyncio.run(_build(url, args.steps))
            get_ms, applied = asyncio.run(_gets(url, run_id, args.gets))
            line = f"{name:<7} get {get_ms:6.3f} ms (applies {applied} records)"
            if name == "sqlite":
                wall, cpu = _cli(url, run_id, args.cli)
                line += f"   history --json {wall:5.2f} s wall, {cpu:5.2f} s cpu"
            print(line)
    print(f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
