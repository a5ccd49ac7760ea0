"""Where a step's time goes: profile the benchmark loop (or DAG) on one store.

Run from the repository root::

    .venv/bin/python benchmarks/profile_loop.py [--store memory://] [--steps 1000]
        [--runs 5] [--profiler cprofile|pyinstrument] [--top 25]
        [--workload loop|dag|open|history|many]

``cprofile`` prints the top functions by cumulative and by self (``tottime``) time, per
committed step; ``pyinstrument`` (``pip install pyinstrument``, in the ``bench`` extra)
prints its call tree. The graph is compiled and the store connected before profiling
starts, so only the runs themselves are profiled. ``open`` profiles entering and leaving
``Engine.open`` on a finished ``--steps``-step run, ``--runs`` times; ``history`` profiles
``Engine.history`` of such a run, ``--runs`` times; ``many`` profiles ``--runs``
concurrent runs of a 4-iteration loop.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_phasegraph import LOOP, dag_yaml

from phasegraph import Engine, open_store


async def _workload(args: argparse.Namespace, tmp: Path, profiler: Any) -> int:
    graph = LOOP
    run_input: dict[str, Any] = {"steps": args.steps}
    if args.workload == "dag":
        graph = tmp / "dag.yaml"
        graph.write_text(dag_yaml(10, 10, 3))
        run_input = {}
    async with open_store(args.store) as store:
        engine = Engine(store)
        prepared = engine.prepare(graph)
        await store.list_runs(limit=1)
        if args.workload in ("open", "history"):
            run_id = (await engine.run(prepared, run_input)).run_id
            async with engine.open(run_id):
                pass
            profiler.start()
            for _ in range(args.runs):
                if args.workload == "history":
                    await engine.history(run_id)
                else:
                    async with engine.open(run_id):
                        pass
            profiler.stop()
            return args.runs
        if args.workload == "many":
            profiler.start()
            states = await asyncio.gather(
                *(engine.run(prepared, {"steps": 4}) for _ in range(args.runs))
            )
            profiler.stop()
            return sum(state.seq for state in states)
        steps = 0
        profiler.start()
        for _ in range(args.runs):
            steps += (await engine.run(prepared, run_input)).seq
        profiler.stop()
        return steps


class _CProfile:
    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def start(self) -> None:
        self.profile.enable()

    def stop(self) -> None:
        self.profile.disable()

    def report(self, steps: int, top: int) -> str:
        out = io.StringIO()
        stats = pstats.Stats(self.profile, stream=out)
        total = stats.total_tt  # type: ignore[attr-defined]
        out.write(f"{steps} units, {total / steps * 1e6:.1f} µs each under cProfile\n")
        for key in ("cumulative", "tottime"):
            out.write(f"\n--- top {top} by {key} ---\n")
            stats.sort_stats(key).print_stats(top)
        return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    workloads = ("loop", "dag", "open", "history", "many")
    parser.add_argument("--workload", choices=workloads, default="loop")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.profiler == "pyinstrument":
        from pyinstrument import Profiler

        profiler: Any = Profiler(interval=0.0001, async_mode="disabled")
    else:
        profiler = _CProfile()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        steps = asyncio.run(_workload(args, Path(tmp), profiler))
        elapsed = time.perf_counter() - started
    print(f"{args.workload} on {args.store}: {steps} units in {elapsed:.2f} s (profiled)")
    if args.profiler == "pyinstrument":
        print(profiler.output_text(unicode=True, color=False, show_all=False))
    else:
        print(profiler.report(steps, args.top))


if __name__ == "__main__":
    main()
