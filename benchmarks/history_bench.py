"""Reading the full history of a long run: ``Engine.history``, its JSON, and decoding alone.

Run from the repository root::

    .venv/bin/python benchmarks/history_bench.py [--steps 10000] [--repeat 15] [--redis URL]

Builds one ``steps``-step run of ``loop.yaml`` per store (outside the clock), then, in
``--repeat`` rounds, each step of a round after the other (interleaved), measures:

* **history** — ``Engine.history``: every record read and built into a ``StepRecord``;
* **JSON, record by record** — the way it is not done: ``Engine.history``, then
  ``views.jsonable`` of each record, ``to_json`` (the same JSON value);
* **JSON, from the bytes** — ``Engine.history_json``, what it does now (the same text);

and prints the median milliseconds of each, then the median microseconds per record of
``codec.decode_record`` and of ``_envelope.read_records`` (checked, unbuilt) over the same
stored bytes. The goal of ``phasegraph history RUN --json`` is 0.3 s for 10,000 steps,
start-up included: ``benchmarks/read_bench.py`` measures the command itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from phasegraph import Engine, Store, codec, open_store
from phasegraph.codec import _envelope, _json
from phasegraph.views import jsonable

GRAPH = Path(__file__).with_name("loop.yaml")


async def _blobs(store: Store, run_id: str) -> list[bytes]:
    return [blob async for _, blob in store.history(run_id)]


async def _json_record_by_record(engine: Engine, run_id: str) -> bytes:
    records = await engine.history(run_id)
    return _json.to_json([jsonable(record) for record in records]).encode()


async def _measure(url: str, steps: int, repeat: int) -> tuple[dict[str, list[float]], int]:
    """Per measure, its samples (ms, or µs per record for decoding) and the record count."""
    async with open_store(url) as store:
        engine = Engine(store)
        state = await engine.run(engine.prepare(GRAPH), {"steps": steps})
        if str(state.status) != "completed":
            raise SystemExit(f"benchmark run did not complete: {state.status}")
        run_id = state.run_id
        blobs = await _blobs(store, run_id)
        from_bytes = json.loads(await engine.history_json(run_id))
        if from_bytes != json.loads(await _json_record_by_record(engine, run_id)):
            raise SystemExit("history_json differs from the record-by-record JSON")
        samples: dict[str, list[float]] = {}

        def keep(name: str, value: float) -> None:
            samples.setdefault(name, []).append(value)

        for _ in range(repeat):
            started = time.perf_counter()
            records = await engine.history(run_id)
            keep("history", (time.perf_counter() - started) * 1e3)
            if len(records) != len(blobs):
                raise SystemExit(f"history has {len(records)} records, not {len(blobs)}")
            started = time.perf_counter()
            await _json_record_by_record(engine, run_id)
            keep("json record by record", (time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            await engine.history_json(run_id)
            keep("json from the bytes", (time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            for blob in blobs:
                codec.decode_record(blob)
            keep("decode_record", (time.perf_counter() - started) * 1e6 / len(blobs))
            started = time.perf_counter()
            _envelope.read_records(blobs)
            keep("read_records", (time.perf_counter() - started) * 1e6 / len(blobs))
    return samples, len(blobs)


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
            samples, count = await _measure(url, args.steps, args.repeat)
            median = {key: statistics.median(values) for key, values in samples.items()}
            print(f"{name}: {count} records, medians of {args.repeat} interleaved rounds")
            for key in ("history", "json record by record", "json from the bytes"):
                values = samples[key]
                print(
                    f"  {key:<22} {median[key]:7.1f} ms "
                    f"(min {min(values):.1f}, max {max(values):.1f})"
                )
            speedup = median["json record by record"] / median["json from the bytes"]
            print(f"  JSON from the bytes: {speedup:.1f}x faster than record by record")
            print(
                f"  decode_record {median['decode_record']:5.2f} µs/record, "
                f"read_records {median['read_records']:5.2f} µs/record"
            )


if __name__ == "__main__":
    asyncio.run(main())
