"""Bytes written and microseconds per step, with 0, 10 KB and 100 KB of unchanged data.

Run from the repository root (Redis must be reachable; keys go under a throwaway prefix
and are deleted afterwards)::

    .venv/bin/python benchmarks/bytes_per_step.py [--steps 1000] [--repeat 5]
        [--redis redis://127.0.0.1:6379/0]

The run is the 1000-step loop of ``loop.yaml`` (one node, one committed step per
iteration). The unchanged data is a string of the given size in the run's input: it is
part of every full snapshot and of no step record, exactly like a large data value that
no step touches.

How each number is measured:

* **µs/step** — wall time of ``Engine.run`` divided by the steps committed, median of
  ``--repeat`` runs (the graph is compiled before the clock starts).
* **bytes/step** — the store is wrapped, and every ``commit`` adds the length of its
  record and of its snapshot (when it carries one) to a counter: the payload bytes the
  engine hands the store, before the store's own per-key or per-row overhead. The seq-0
  commit (the run's creation, a full snapshot) is counted too; the total is divided by
  the number of steps. For SQLite the sum of ``length(blob)`` over the run's rows of
  ``records`` and ``snapshots`` is printed beside it as a cross-check (they agree).
* **floor** (Redis) — what writing the whole state each step would cost at the very
  least: ``msgpack.packb`` of the same final snapshot (as plain data) plus one redis-py
  ``SET`` of those bytes, one round trip, medians over many calls. ``codec`` is the time
  of phasegraph's own canonical ``encode_snapshot`` of that state, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgpack
import redis.asyncio
from bench_common import wchar

from phasegraph import Engine, RunState, open_store
from phasegraph.codec import encode_snapshot
from phasegraph.store import Commit, ForwardingStore, Lease, Store
from phasegraph.views import jsonable

GRAPH = Path(__file__).with_name("loop.yaml")
SIZES = {"0 KB": 0, "10 KB": 10 * 1024, "100 KB": 100 * 1024}


class CountingStore(ForwardingStore):
    """Delegates to a store and counts the payload bytes of every commit."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.record_bytes = 0
        self.snapshot_bytes = 0
        self.snapshots = 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        self.record_bytes += len(commit.record)
        if commit.snapshot is not None:
            self.snapshot_bytes += len(commit.snapshot)
            self.snapshots += 1


async def _run(store: Store, steps: int, size: int) -> tuple[RunState, float]:
    engine = Engine(store)
    engine.prepare(GRAPH)  # compile outside the timed region
    started = time.perf_counter()
    state = await engine.run(GRAPH, {"steps": steps, "blob": "x" * size})
    elapsed = time.perf_counter() - started
    if str(state.status) != "completed":
        raise SystemExit(f"benchmark run did not complete: {state.status}")
    return state, elapsed / state.seq * 1e6


def _sqlite_blob_bytes(db: Path, run_id: str) -> int:
    with sqlite3.connect(db) as conn:
        total = 0
        for table in ("records", "snapshots"):
            (size,) = conn.execute(
                f"SELECT coalesce(sum(length(blob)), 0) FROM {table} WHERE run_id = ?", (run_id,)
            ).fetchone()
            total += size
    return total


async def _measure(url: str, steps: int, size: int, repeat: int) -> dict[str, Any]:
    """µs/step (median of ``repeat`` plain runs) and bytes/step (one counted run)."""
    samples = []
    for _ in range(repeat):
        async with open_store(url) as store:
            samples.append((await _run(store, steps, size))[1])
    async with open_store(url) as inner:
        counting = CountingStore(inner)
        await inner.list_runs(limit=1)  # connect (and create the file) before counting
        written = wchar()
        state, _ = await _run(counting, steps, size)
        written = wchar() - written
    row: dict[str, Any] = {
        "us": statistics.median(samples),
        "steps": state.seq,
        "records": counting.record_bytes / state.seq,
        "snaps": counting.snapshot_bytes / state.seq,
        "snapshots": counting.snapshots,
        "state": state,
    }
    row["bytes"] = row["records"] + row["snaps"]
    if url.startswith("sqlite:"):
        db = Path(urlsplit(url).path[1:])
        row["check"] = _sqlite_blob_bytes(db, state.run_id) / state.seq
        row["written"] = written / state.seq
    return row


async def _floor(client: redis.asyncio.Redis, key: str, state: RunState) -> dict[str, float]:
    """Median µs of msgpack-encoding the snapshot, of phasegraph's codec, of one SET."""
    plain = jsonable(state)
    payload = msgpack.packb(plain, use_bin_type=True)

    def timed(fn: Any, n: int) -> float:
        runs = []
        for _ in range(n):
            started = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - started)
        return statistics.median(runs) * 1e6

    encode = timed(lambda: msgpack.packb(plain, use_bin_type=True), 300)
    codec = timed(lambda: encode_snapshot(state), 300)
    await client.set(key, payload)  # connect first
    sets = []
    for _ in range(300):
        started = time.perf_counter()
        await client.set(key, payload)
        sets.append(time.perf_counter() - started)
    set_us = statistics.median(sets) * 1e6
    return {"bytes": len(payload), "encode": encode, "codec": codec, "set": set_us}


def _with_prefix(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), ("prefix", prefix)])
    return urlunsplit(parts._replace(query=query))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    prefix = "pgbench" + uuid.uuid4().hex[:8]
    client = redis.asyncio.Redis.from_url(args.redis)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    floors: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            urls = {
                "sqlite": f"sqlite:///{tmp}/bench.db",
                "redis": _with_prefix(args.redis, prefix),
            }
            for label, size in SIZES.items():
                for name, url in urls.items():
                    row = await _measure(url, args.steps, size, args.repeat)
                    rows.append((name, label, row))
                floors[label] = await _floor(client, f"{prefix}:floor", row["state"])
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    _print(rows, floors, args.steps)


def _print(
    rows: list[tuple[str, str, dict[str, Any]]], floors: dict[str, dict[str, float]], steps: int
) -> None:
    print(f"{steps}-step loop, default checkpoint every 64 steps")
    print(
        f"{'store':<7} {'unchanged':>9} {'µs/step':>8} {'bytes/step':>10} "
        f"{'record B':>9} {'snapshot B':>10} {'snapshots':>9}  check"
    )
    for name, label, row in rows:
        check = ""
        if "check" in row:
            check = f"{row['check']:.0f} B/step in tables, {row['written']:.0f} B/step written"
        print(
            f"{name:<7} {label:>9} {row['us']:8.1f} {row['bytes']:10.0f} "
            f"{row['records']:9.0f} {row['snaps']:10.0f} {row['snapshots']:9d}  {check}"
        )
    print("\nfloor: msgpack.packb(snapshot) + one redis-py SET per step (Redis)")
    print(
        f"{'unchanged':>9} {'snapshot B':>10} {'packb µs':>8} {'SET µs':>7} {'floor µs':>8} "
        f"{'codec µs':>8} {'engine µs':>9}"
    )
    engine_redis = {label: row["us"] for name, label, row in rows if name == "redis"}
    for label, floor in floors.items():
        print(
            f"{label:>9} {floor['bytes']:10d} {floor['encode']:8.1f} {floor['set']:7.1f} "
            f"{floor['encode'] + floor['set']:8.1f} {floor['codec']:8.1f} "
            f"{engine_redis[label]:9.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
