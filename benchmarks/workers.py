"""Workers on one Redis: throughput by worker count, takeover time, and what a waiting run costs.

    python benchmarks/workers.py [--runs 300] [--steps 200] [--workers 1 2 4] [--repeat 3]
                                 [--waiting 20000] [--lease-ttl 3] [--cluster]

Uses a private ``redis-server`` (or ``$PHASEGRAPH_TEST_REDIS_URL``; with ``--cluster`` a
private three-primary Redis Cluster, or ``$PHASEGRAPH_TEST_REDIS_CLUSTER_URL``), real
``phasegraph worker`` processes, and the loop graph of ``loop.yaml`` (no-op actions: what
is measured is the engine, the store and the queue).

* **Throughput**: ``--runs`` runs of ``--steps`` steps are created (their first step
  committed), then queued at once; the clock runs from the first enqueue until the last
  run completed. Worker counts are measured round robin, ``--repeat`` times each, and the
  medians reported with the 1-minute load average sampled at the end of each sample.
  Redis' own cost per commit comes from ``INFO commandstats`` (µs per ``EVALSHA``) and
  ``INFO cpu`` (server CPU per commit), which bound the commits/s of one primary.
* **Takeover**: two workers with ``--lease-ttl`` (and ``--reclaim-after`` the same), runs
  whose steps nap; one worker is SIGKILLed and the time until every run it held commits a
  step in the other worker is reported.
* **Waiting runs**: ``--waiting`` runs are driven to a human gate with a deadline, then
  the Redis memory and keys they hold are divided by their number. No worker holds them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from phasegraph import Engine, open_store
from phasegraph.testing import redis_cluster, redis_server
from phasegraph.worker import work_queue_of

HERE = Path(__file__).resolve().parent
LOOP = HERE / "loop.yaml"
WAITING = HERE / "waiting.yaml"


def _argv(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("phasegraph")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "phasegraph", *args]


@contextmanager
def workers(url: str, count: int, *options: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes, started and ready (each printed its first line)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            _argv("worker", "--store", url, "--name", f"w{i}", *options),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stderr is not None
            line = proc.stderr.readline().decode()
            if not line.startswith("worker "):
                raise SystemExit(f"a worker did not start: {line}{proc.stderr.read().decode()}")
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
            if proc.stderr is not None:
                proc.stderr.close()


def _prefixed(url: str) -> tuple[str, str]:
    prefix = "pgbench" + uuid.uuid4().hex[:8]
    return f"{url}?prefix={prefix}", prefix


async def _create(url: str, graph: Path, run_input: dict[str, Any], count: int) -> list[str]:
    async with open_store(url) as store:
        engine = Engine(store)
        run_ids = []
        for _ in range(count):
            async with engine.start(graph, run_input) as run:
                run_ids.append(run.run_id)
        return run_ids


async def _enqueue_and_wait(url: str, run_ids: list[str], status: str) -> float:
    """Queue every run, then wait until all are ``status``; seconds from the first enqueue."""
    async with open_store(url) as store:
        queue = work_queue_of(store)
        try:
            started = time.perf_counter()
            await asyncio.gather(*(queue.enqueue(run_id) for run_id in run_ids))
            wanted = set(run_ids)
            while True:
                metas = await store.list_runs(status=status, limit=len(run_ids) + 10)
                if wanted <= {meta.run_id for meta in metas}:
                    return time.perf_counter() - started
                await asyncio.sleep(0.05)  # a light poll: the workers need the CPU
        finally:
            await queue.aclose()


def _client(url: str) -> Any:
    """A redis-py client of a server's or a cluster's (``redis+cluster://``) URL."""
    if url.startswith("redis+cluster://"):
        return redis.RedisCluster.from_url(url.replace("+cluster", "", 1))
    return redis.Redis.from_url(url)


def _info(client: Any, section: str) -> list[dict[str, Any]]:
    """One INFO section of the server, or of every primary of a cluster."""
    if isinstance(client, redis.RedisCluster):
        found = client.info(section, target_nodes=redis.RedisCluster.PRIMARIES)
        return list(found.values())
    return [client.info(section)]


def _server_stats(url: str) -> tuple[int, float, float]:
    """EVALSHA calls, their total µs, and the servers' CPU seconds so far (all primaries)."""
    client = _client(url)
    try:
        stats = [info.get("cmdstat_evalsha", {}) for info in _info(client, "commandstats")]
        cpu = _info(client, "cpu")
        return (
            sum(int(one.get("calls", 0)) for one in stats),
            sum(float(one.get("usec", 0)) for one in stats),
            sum(float(one["used_cpu_user"]) + float(one["used_cpu_sys"]) for one in cpu),
        )
    finally:
        client.close()


def throughput(base: str, count: int, runs: int, steps: int) -> dict[str, float]:
    url, _ = _prefixed(base)
    run_ids = asyncio.run(_create(url, LOOP, {"steps": steps}, runs))
    with workers(url, count, "--concurrency", "64", "--quiet"):
        calls0, usec0, cpu0 = _server_stats(base)
        seconds = asyncio.run(_enqueue_and_wait(url, run_ids, "completed"))
        calls1, usec1, cpu1 = _server_stats(base)
    commits = calls1 - calls0
    return {
        "steps_per_s": commits / seconds,
        "load": os.getloadavg()[0],
        "redis_us_per_commit": (usec1 - usec0) / max(commits, 1),
        "redis_cpu_us_per_commit": (cpu1 - cpu0) * 1e6 / max(commits, 1),
    }


async def _heads(url: str, run_ids: list[str]) -> dict[str, int]:
    async with open_store(url) as store:
        engine = Engine(store)
        return {run_id: (await engine.get(run_id)).seq for run_id in run_ids}


def takeover(base: str, ttl: float) -> tuple[float, int]:
    """Seconds from a worker's SIGKILL until every run it held committed again; how many."""
    url, prefix = _prefixed(base)
    run_ids = asyncio.run(_create(url, WAITING, {"steps": 90_000, "nap": 0.05}, 40))
    options = ("--concurrency", "40", "--lease-ttl", str(ttl), "--quiet")
    with workers(url, 2, *options) as procs:
        asyncio.run(_enqueue_and_wait(url, run_ids, "running"))
        time.sleep(1.0)  # both workers are driving by now
        client = _client(base)
        held = {
            row["message_id"]
            for row in client.xpending_range(
                f"{prefix}:{{q0}}:work", "workers", "-", "+", 1000, "w0"
            )
        }
        entries = client.xrange(f"{prefix}:{{q0}}:work")
        client.close()
        theirs = [fields[b"run"].decode() for entry_id, fields in entries if entry_id in held]
        before = asyncio.run(_heads(url, theirs))
        procs[0].send_signal(signal.SIGKILL)
        killed = time.perf_counter()
        procs[0].wait()
        after = dict(before)
        while any(after[run_id] <= before[run_id] for run_id in theirs):
            time.sleep(0.05)
            after = asyncio.run(_heads(url, theirs))
        return time.perf_counter() - killed, len(theirs)


async def _park(url: str, count: int) -> None:
    async with open_store(url) as store:
        engine = Engine(store)
        queue = work_queue_of(store)
        try:
            for _ in range(count):
                state = await engine.run(WAITING, {"steps": 2})
                await queue.schedule(state.run_id, int(time.time() * 1000) + 3_600_000)
        finally:
            await queue.aclose()


def _memory(client: Any) -> tuple[int, int]:
    """Bytes of ``used_memory`` and keys, summed over the primaries."""
    if isinstance(client, redis.RedisCluster):
        client.execute_command("MEMORY PURGE", target_nodes=redis.RedisCluster.PRIMARIES)
        keys = int(client.dbsize(target_nodes=redis.RedisCluster.PRIMARIES))  # summed
    else:
        client.execute_command("MEMORY", "PURGE")
        keys = client.dbsize()
    return sum(int(info["used_memory"]) for info in _info(client, "memory")), keys


def waiting_cost(base: str, count: int) -> dict[str, float]:
    url, _ = _prefixed(base)
    client = _client(base)
    try:
        memory0, keys0 = _memory(client)
        asyncio.run(_park(url, count))
        memory1, keys1 = _memory(client)
    finally:
        client.close()
    return {"bytes_per_run": (memory1 - memory0) / count, "keys_per_run": (keys1 - keys0) / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--waiting", type=int, default=20_000)
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--cluster", action="store_true", help="on a 3-primary Redis Cluster")
    args = parser.parse_args()
    with redis_cluster() if args.cluster else redis_server() as base:
        samples: dict[int, list[dict[str, float]]] = {count: [] for count in args.workers}
        for _ in range(args.repeat):
            for count in args.workers:
                samples[count].append(throughput(base, count, args.runs, args.steps))
        where = "a 3-primary Redis Cluster" if args.cluster else "one Redis server"
        print(f"nproc {os.cpu_count()}; {where}; {args.runs} runs x {args.steps} steps; medians")
        print("| workers | steps/s | ÷ 1 | load (1 min) | Redis µs/commit | Redis CPU µs/commit |")
        print("|---|---|---|---|---|---|")
        one = statistics.median(s["steps_per_s"] for s in samples[args.workers[0]])
        for count, rows in samples.items():
            rate = statistics.median(s["steps_per_s"] for s in rows)
            cells = [
                statistics.median(s[key] for s in rows)
                for key in ("load", "redis_us_per_commit", "redis_cpu_us_per_commit")
            ]
            shown = " | ".join(f"{cell:.1f}" for cell in cells)
            print(f"| {count} | {rate:,.0f} | {rate / one:.2f} | {shown} |")
        seconds, moved = takeover(base, args.lease_ttl)
        print(
            f"\ntakeover: a SIGKILLed worker's {moved} runs all committed again in another "
            f"worker {seconds:.2f} s after the kill (--lease-ttl {args.lease_ttl:g}, "
            f"--reclaim-after the same; load {os.getloadavg()[0]:.1f})"
        )
        if args.waiting:
            cost = waiting_cost(base, args.waiting)
            print(
                f"waiting runs: {args.waiting} runs at a gate with a deadline hold "
                f"{cost['bytes_per_run']:,.0f} B of Redis memory and {cost['keys_per_run']:.1f} "
                f"keys each, no worker; 100,000 would hold "
                f"{cost['bytes_per_run'] * 100_000 / 2**20:,.0f} MiB"
            )


if __name__ == "__main__":
    main()
