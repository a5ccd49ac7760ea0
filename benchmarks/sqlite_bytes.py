"""Bytes the SQLite store hands the OS per commit, against raw sqlite3 writing the same.

Run from the repository root::

    .venv/bin/python benchmarks/sqlite_bytes.py [--steps 1000] [--turns 500] [--size 2048]
        [--synchronous normal]

Two runs, each on a fresh file:

* **loop** — ``loop.yaml`` for ``--steps`` steps (a tiny record per step);
* **conversation** — ``conversation.yaml``: ``--turns`` messages of ``--size`` bytes,
  one appended per step (the 500 x 2 KB append).

**written** is the growth of this process's ``wchar`` (``/proc/self/io``: the bytes
passed to ``write``/``pwrite``, WAL frames and checkpoints alike) over the run, the file
created and the store connected beforehand. Nothing else in the process writes meanwhile.

The **floor** replays the very commits the engine handed the store (the same record,
snapshot and metadata bytes, in the same order) into a fresh file with raw ``sqlite3``
and the least a hand-written store could write: the same journal (WAL) and
``synchronous``, SQLite's default page size, one transaction per commit that inserts the
record (and the snapshot, when the commit carries one) into rowid tables of their own and
updates the run's one metadata row. It keeps no lease, no list index and no other run.
The ratio written / floor is the target (≤ 1.15).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import wchar  # noqa: E402

from phasegraph import Engine, open_store  # noqa: E402
from phasegraph.store import Commit, ForwardingStore, Lease, Store  # noqa: E402


class _Recording(ForwardingStore):
    """Delegates to a store and keeps every commit it hands on."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.commits: list[Commit] = []

    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        self.commits.append(commit)


async def _engine_run(
    db: Path, graph: str, run_input: dict[str, Any], synchronous: str
) -> tuple[int, list[Commit], str]:
    async with open_store(f"sqlite:///{db}?synchronous={synchronous}") as inner:
        store = _Recording(inner)
        await inner.list_runs(limit=1)  # create the file and connect before counting
        engine = Engine(store)
        prepared = engine.prepare(HERE / graph)
        before = wchar()
        state = await engine.run(prepared, run_input)
        written = wchar() - before
    if str(state.status) != "completed":
        raise SystemExit(f"the benchmark run ended {state.status}")
    return written, store.commits, state.run_id


def _floor(db: Path, run_id: str, commits: list[Commit], synchronous: str) -> int:
    """Bytes raw sqlite3 writes for the same commits (see the module docstring)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL)")
    conn.execute("CREATE TABLE snapshots (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL)")
    conn.execute(
        "CREATE TABLE meta (run_id TEXT PRIMARY KEY, graph TEXT, status TEXT, seq INTEGER, "
        "created_at REAL, updated_at REAL)"
    )
    conn.execute("INSERT INTO meta (run_id, seq) VALUES (?, -1)", (run_id,))
    before = wchar()
    for commit in commits:
        meta = commit.meta
        conn.execute("BEGIN")
        conn.execute("INSERT INTO records VALUES (?, ?)", (commit.seq, commit.record))
        if commit.snapshot is not None:
            conn.execute("INSERT INTO snapshots VALUES (?, ?)", (commit.seq, commit.snapshot))
        conn.execute(
            "UPDATE meta SET graph = ?, status = ?, seq = ?, created_at = ?, updated_at = ? "
            "WHERE run_id = ?",
            (meta.graph, meta.status, commit.seq, meta.created_at, meta.updated_at, run_id),
        )
        conn.execute("COMMIT")
    written = wchar() - before
    conn.close()
    return written


def measure(graph: str, run_input: dict[str, Any], synchronous: str) -> dict[str, float]:
    """One case: the store's bytes, the floor's, per commit, and the payload handed over."""
    with tempfile.TemporaryDirectory() as tmp:
        written, commits, run_id = asyncio.run(
            _engine_run(Path(tmp) / "store.db", graph, run_input, synchronous)
        )
        floor = _floor(Path(tmp) / "floor.db", run_id, commits, synchronous)
    payload = sum(len(c.record) + len(c.snapshot or b"") for c in commits)
    count = len(commits)
    return {
        "commits": count,
        "payload": payload / count,
        "written": written / count,
        "floor": floor / count,
        "ratio": written / floor,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--synchronous", choices=["normal", "full"], default="normal")
    args = parser.parse_args()
    cases = {
        f"loop {args.steps}": ("loop.yaml", {"steps": args.steps}),
        f"conversation {args.turns} x {args.size} B": (
            "conversation.yaml",
            {"turns": args.turns, "size": args.size},
        ),
    }
    print(f"synchronous={args.synchronous}; bytes per commit (wchar)")
    print(f"{'case':<28} {'commits':>7} {'payload':>8} {'written':>8} {'floor':>8} {'ratio':>6}")
    for label, (graph, run_input) in cases.items():
        row = measure(graph, run_input, args.synchronous)
        print(
            f"{label:<28} {row['commits']:7.0f} {row['payload']:8.0f} {row['written']:8.0f} "
            f"{row['floor']:8.0f} {row['ratio']:6.2f}"
        )


if __name__ == "__main__":
    main()
