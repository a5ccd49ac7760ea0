"""Bytes written for a growing conversation: a run that appends one message per step.

Run from the repository root::

    .venv/bin/python benchmarks/conversation_bytes.py [--turns 500] [--size 2048]
        [--redis redis://127.0.0.1:PORT/0]

The run is ``conversation.yaml``: one node whose action returns the ``conversation`` list
it was given with one message of ``--size`` bytes of text appended, until the list holds
``--turns`` messages (one committed step per message). It is what a model loop does to
its conversation.

How each number is measured:

* **conversation** — the size of the finished list alone: ``codec.encode_value`` of it.
* **written** — every ``commit`` the engine hands the store adds the length of its record
  and of its snapshot (when it carries one): the payload bytes, before the store's own
  per-key or per-row overhead. Printed with its ratio to the conversation's size.
* **file** (SQLite) — the size of the database file (and its WAL) after the run, with
  ``journal_mode=WAL`` checkpointed, for a fresh file holding only this run.
* **used_memory** (Redis) — the growth of ``INFO memory`` ``used_memory`` over the run
  (keys go under a throwaway prefix, deleted afterwards).
* **read** — median milliseconds of ``Engine.get`` of the finished run (its head) and
  of ``Engine.history`` of all its records, over 5 reads each.

Every seq of the run is then read back (``Engine.get(run, seq)``) and its conversation
checked against the messages the action wrote: a wrong item ends the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio

from phasegraph import Engine, Store, open_store
from phasegraph.codec import _envelope
from phasegraph.store import Commit, ForwardingStore, Lease

HERE = Path(__file__).parent
GRAPH = HERE / "conversation.yaml"
sys.path.insert(0, str(HERE))

from loop_actions import _message  # noqa: E402


class CountingStore(ForwardingStore):
    """Delegates to a store and counts the payload bytes of every commit."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.written = 0
        self.snapshots = 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        self.written += len(commit.record) + len(commit.snapshot or b"")
        self.snapshots += commit.snapshot is not None


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


async def _measure(url: str, turns: int, size: int, check: bool) -> dict[str, Any]:
    async with open_store(url) as inner:
        store = CountingStore(inner)
        await inner.list_runs(limit=1)  # connect (and create the file) before counting
        engine = Engine(store)
        started = time.perf_counter()
        state = await engine.run(GRAPH, {"turns": turns, "size": size})
        elapsed = time.perf_counter() - started
        if str(state.status) != "completed":
            raise SystemExit(f"benchmark run did not complete: {state.status}")
        conversation = state.data["conversation"]
        if conversation != [_message(turn, size) for turn in range(turns)]:
            raise SystemExit("the finished conversation is not the one written")
        gets, histories = [], []
        for _ in range(5):
            began = time.perf_counter()
            await engine.get(state.run_id)
            gets.append(time.perf_counter() - began)
            began = time.perf_counter()
            await engine.history(state.run_id)
            histories.append(time.perf_counter() - began)
        if check:  # every seq rebuilds the exact list: messages 0 .. seq - 2
            for seq in range(state.seq + 1):
                got = (await engine.get(state.run_id, seq)).data.get("conversation", [])
                if got != conversation[: max(0, min(seq - 1, turns))]:
                    raise SystemExit(f"seq {seq} reads back a different conversation")
        return {
            "run_id": state.run_id,
            "steps": state.seq,
            "conversation": len(_envelope.encode_value(conversation)),
            "written": store.written,
            "snapshots": store.snapshots,
            "us_per_step": elapsed / state.seq * 1e6,
            "get_ms": _median_ms(gets),
            "history_ms": _median_ms(histories),
        }


def _report(name: str, row: dict[str, Any], extra: str) -> None:
    ratio = row["written"] / row["conversation"]
    print(
        f"{name:<7} conversation {row['conversation'] / 1e6:6.2f} MB   written "
        f"{row['written'] / 1e6:7.2f} MB ({ratio:5.2f}x, {row['snapshots']} snapshots)  "
        f"{extra}  {row['us_per_step']:6.0f} us/step   get {row['get_ms']:6.2f} ms   "
        f"history {row['history_ms']:6.1f} ms"
    )


def _file_bytes(db: Path) -> int:
    """The bytes of the database file and its side files, after a WAL checkpoint."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(path.stat().st_size for path in db.parent.iterdir())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--redis", default=None, help="also measure this redis:// URL")
    parser.add_argument("--no-check", action="store_true", help="skip reading every seq")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "conversation.db"
        row = await _measure(f"sqlite:///{db}", args.turns, args.size, not args.no_check)
        files = _file_bytes(db)
        _report("sqlite", row, f"file {files / 1e6:7.2f} MB")
    if args.redis:
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        client = redis.asyncio.from_url(args.redis)
        before = (await client.info("memory"))["used_memory"]
        sep = "&" if "?" in args.redis else "?"
        url = f"{args.redis}{sep}prefix={prefix}"
        row = await _measure(url, args.turns, args.size, not args.no_check)
        used = (await client.info("memory"))["used_memory"] - before
        _report("redis", row, f"used_memory +{used / 1e6:6.2f} MB")
        keys = [key async for key in client.scan_iter(f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    print(f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    asyncio.run(main())
