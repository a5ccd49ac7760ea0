"""Per-step cost of a 1000-step loop on each store.

Run from the repository root::

    .venv/bin/python benchmarks/loop_bench.py [--steps 1000] [--repeat 7] [--redis URL]

Prints the median microseconds per committed step (engine + commit) for each store.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from phasegraph import Engine, open_store

GRAPH = Path(__file__).with_name("loop.yaml")


async def _one(url: str, steps: int) -> float:
    async with open_store(url) as store:
        engine = Engine(store)
        engine.prepare(GRAPH)  # compile outside the timed region
        started = time.perf_counter()
        state = await engine.run(GRAPH, {"steps": steps})
        elapsed = time.perf_counter() - started
    if str(state.status) != "completed":
        raise SystemExit(f"benchmark run did not complete: {state.status}")
    return elapsed / state.seq * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--redis", default=None, help="also measure this redis:// URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/bench.db"}
        if args.redis:
            urls["redis"] = args.redis
        for name, url in urls.items():
            samples = [await _one(url, args.steps) for _ in range(args.repeat)]
            print(
                f"{name:<8} {statistics.median(samples):8.1f} µs/step "
                f"(min {min(samples):.1f}, max {max(samples):.1f}, {args.repeat} runs "
                f"of {args.steps} steps)"
            )


if __name__ == "__main__":
    asyncio.run(main())
