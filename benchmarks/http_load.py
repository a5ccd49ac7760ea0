"""Load on the HTTP API: many concurrent runs of a small graph on a Redis store.

Run from the repository root (a Redis must answer at the URL)::

    .venv/bin/python benchmarks/http_load.py [--runs 200] [--max-runs 200] [--redis URL]

Starts ``phasegraph serve`` on 127.0.0.1 (a free port) on its own key prefix, uploads a
two-node graph (``plan`` then ``count`` from the built-in hello example), starts every run
at once over HTTP, follows each run's event stream until it ends, then checks every run
completed with the right data. Prints runs/s, the p50/p99 time from POST to the run's
last event, the p50/p99 wait of a new run for a free slot (its first step), and the
p50/p99 step latency (time between consecutive committed steps of a run, from the step
records). Deletes its Redis keys afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

GRAPH = """
graph: http_load
input: {type: object, properties: {who: {type: string}}, required: [who]}
nodes:
  - id: plan
    machine: task
    writes: [greeting]
    bind: {run: {python: "phasegraph.graphs.hello:plan", triggers: [ok]}}
  - id: count
    machine: task
    needs: [plan]
    writes: [letters]
    bind: {run: {python: "phasegraph.graphs.hello:count", triggers: [ok]}}
"""
_SCRIPT = Path(sys.executable).with_name("phasegraph")
_MAIN = "from phasegraph.cli._main import main; raise SystemExit(main())"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _serve(store: str, max_runs: int, workdir: str) -> tuple[asyncio.subprocess.Process, str]:
    argv = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", _MAIN]
    argv += ["serve", "--store", store, "--port", "0", "--max-runs", str(max_runs), "-q"]
    argv += ["--allow-python", "phasegraph.graphs.hello", "--upload-dir", workdir]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=workdir, stdout=asyncio.subprocess.PIPE, env=dict(os.environ)
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    if not line.startswith("phasegraph serving "):
        raise SystemExit(f"the server did not start: {line!r}")
    return process, line.split()[-1]


async def _one(session: aiohttp.ClientSession, index: int) -> dict[str, Any]:
    who = f"user{index}"
    started = time.perf_counter()
    async with session.post("/runs", json={"graph_yaml": GRAPH, "input": {"who": who}}) as r:
        if r.status != 201:
            raise SystemExit(f"run {index}: POST /runs answered {r.status}: {await r.text()}")
        run_id = (await r.json())["run_id"]
    last = ""
    async with session.get(f"/runs/{run_id}/events") as stream:
        async for raw in stream.content:  # the server ends the stream when the run is done
            line = raw.decode().strip()
            if line.startswith("event: "):
                last = line.removeprefix("event: ")
    finished = time.perf_counter()
    async with session.get(f"/runs/{run_id}/snapshot") as r:
        snapshot = await r.json()
    async with session.get(f"/runs/{run_id}/history?limit=1000") as r:
        records = (await r.json())["records"]
    greeting = f"hello, {who}"
    expected = {"greeting": greeting, "letters": sum(ch.isalpha() for ch in greeting)}
    if last != "run_completed" or snapshot["status"] != "completed" or snapshot["data"] != expected:
        raise SystemExit(f"run {run_id}: wrong outcome {snapshot['status']} {snapshot['data']}")
    times = [_seconds(record["time"]) for record in records]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The first gap (seq 0 -> 1) is the wait for a free run slot; the rest are steps.
    return {"started": started, "finished": finished, "queued": gaps[0], "steps": gaps[1:]}


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--max-runs", type=int, default=200, help="the server's --max-runs")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    prefix = "pgload" + uuid.uuid4().hex[:8]
    options = f"prefix={prefix}"
    store = f"{args.redis}{'&' if '?' in args.redis else '?'}{options}"
    with tempfile.TemporaryDirectory() as workdir:
        process, url = await _serve(store, args.max_runs, workdir)
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(url, connector=connector) as session:
                began = time.perf_counter()
                results = await asyncio.gather(*(_one(session, i) for i in range(args.runs)))
                elapsed = time.perf_counter() - began
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
            client = aioredis.Redis.from_url(args.redis)
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
            if keys:
                await client.delete(*keys)
            await client.aclose()
    _report(args.runs, elapsed, results)


def _report(runs: int, elapsed: float, results: list[dict[str, Any]]) -> None:
    latencies = [r["finished"] - r["started"] for r in results]
    queued = [r["queued"] for r in results]
    steps = [gap for r in results for gap in r["steps"]]
    print(f"{runs} runs completed with the right data in {elapsed:.2f} s")
    print(f"throughput      {runs / elapsed:8.1f} runs/s")
    print(
        f"run latency     p50 {_percentile(latencies, 0.5) * 1e3:8.1f} ms   "
        f"p99 {_percentile(latencies, 0.99) * 1e3:8.1f} ms   (POST to last event)"
    )
    print(
        f"start delay     p50 {_percentile(queued, 0.5) * 1e3:8.1f} ms   "
        f"p99 {_percentile(queued, 0.99) * 1e3:8.1f} ms   "
        "(seq 0 to 1: creation to first step, with any wait for a slot)"
    )
    print(
        f"step latency    p50 {_percentile(steps, 0.5) * 1e3:8.1f} ms   "
        f"p99 {_percentile(steps, 0.99) * 1e3:8.1f} ms   "
        f"({len(steps)} steps; mean {statistics.fmean(steps) * 1e3:.1f} ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
