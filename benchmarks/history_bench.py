"""Reading the full history of a long run: ``Engine.history`` and record decoding alone.

Run from the repository root::

    .venv/bin/python benchmarks/history_bench.py [--steps 10000] [--repeat 15] [--redis URL]

Builds one ``steps``-step run of ``loop.yaml`` per store (outside the clock), then prints
the median milliseconds of a full ``Engine.history`` read and the median microseconds per
record of ``codec.decode_record`` over the same stored bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from phasegraph import Engine, Store, codec, open_store

GRAPH = Path(__file__).with_name("loop.yaml")


async def _blobs(store: Store, run_id: str) -> list[bytes]:
    return [blob async for _, blob in store.history(run_id)]


async def _measure(url: str, steps: int, repeat: int) -> tuple[list[float], list[float], int]:
    """History read times (ms), decode-only times (µs/record) and the record count."""
    async with open_store(url) as store:
        engine = Engine(store)
        state = await engine.run(engine.prepare(GRAPH), {"steps": steps})
        if str(state.status) != "completed":
            raise SystemExit(f"benchmark run did not complete: {state.status}")
        blobs = await _blobs(store, state.run_id)
        reads, decodes = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            records = await engine.history(state.run_id)
            reads.append((time.perf_counter() - started) * 1e3)
            if len(records) != len(blobs):
                raise SystemExit(f"history has {len(records)} records, not {len(blobs)}")
            started = time.perf_counter()
            for blob in blobs:
                codec.decode_record(blob)
            decodes.append((time.perf_counter() - started) * 1e6 / len(blobs))
    return reads, decodes, len(blobs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--redis", default=None, help="also measure this redis:// URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/bench.db"}
        if args.redis:
            urls["redis"] = args.redis
        for name, url in urls.items():
            reads, decodes, count = await _measure(url, args.steps, args.repeat)
            print(
                f"{name:<8} history {statistics.median(reads):7.1f} ms "
                f"(min {min(reads):.1f}, max {max(reads):.1f}; {count} records, "
                f"{args.repeat} reads)   decode {statistics.median(decodes):5.2f} µs/record"
            )


if __name__ == "__main__":
    asyncio.run(main())
