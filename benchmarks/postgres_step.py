"""A phasegraph step on Postgres beside the floor and beside LangGraph's PostgresSaver.

Run from the repository root against a Postgres that may create a database (a throwaway
one is made for the run and dropped after)::

    .venv/bin/python benchmarks/postgres_step.py [--postgres postgresql://postgres@127.0.0.1/test]
        [--steps 1000] [--rounds 3] [--callgrind] [--langgraph PYTHON]

Three loops, side by side in one run, each on its own table in that database:

* **phasegraph**: ``loop.yaml`` (one node, one committed step per iteration) on the
  Postgres store: each step is the interpreter, the codec and one commit statement;
* **raw psycopg**: the same step records' bytes (taken from the phasegraph run), each
  written by ``INSERT … VALUES (run, seq, record)`` in autocommit mode (``INSERT;
  COMMIT``) on one ``psycopg.AsyncConnection``, awaited one by one: the least a store
  of these bytes can do per step with the same driver;
* **LangGraph**: a counter loop (one node adding 1 until ``n``, as ``compare.py``'s) with
  ``PostgresSaver`` and ``durability="sync"`` (each checkpoint written before the next
  step, as phasegraph commits), in another virtualenv's Python (``--langgraph``) that has
  ``langgraph`` and ``langgraph-checkpoint-postgres``: each step is one checkpoint.

Wall: microseconds per step, the median of ``--rounds`` alternating rounds, on loopback.
With ``--callgrind``: the client's instructions per step (``PYTHONHASHSEED=0``, the
difference of a short and a long run, so start-up cancels; the server's work is not
counted). Both are printed with the ratios phasegraph / raw and phasegraph / LangGraph.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from _callgrind import instructions

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHORT, LONG = 200, 1200

_PHASEGRAPH = r"""
import asyncio, sys, time
from phasegraph import Engine, RunOptions, open_store

async def main(url, count, loop):
    async with open_store(url) as store:
        engine = Engine(store, options=RunOptions(lease_ttl=3600.0))
        prepared = engine.prepare(loop)
        await engine.run(prepared, {"steps": 5})  # connected, schema made, code warm
        started = time.perf_counter()
        state = await engine.run(prepared, {"steps": count})
        print((time.perf_counter() - started) / (state.seq + 1) * 1e6, state.run_id)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""

_RAW = r"""
import asyncio, sys, time, uuid
import psycopg

async def main(url, count, path):
    blob = open(path, "rb").read()
    records, at = [], 0
    while at < len(blob):
        size = int.from_bytes(blob[at:at + 4], "little")
        records.append(blob[at + 4:at + 4 + size])
        at += 4 + size
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=None)
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS raw (run_id text, seq bigint, record bytea, "
        "PRIMARY KEY (run_id, seq))"
    )
    run = uuid.uuid4().hex
    insert = b"INSERT INTO raw (run_id, seq, record) VALUES (%s, %s, %b)"
    await conn.execute(insert, (run, -1, b"warm"))
    started = time.perf_counter()
    for seq in range(count):
        await conn.execute(insert, (run, seq, records[seq % len(records)]))
    print((time.perf_counter() - started) / count * 1e6, run)
    await conn.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""

_LANGGRAPH = r"""
import sys, time, uuid
from typing import TypedDict
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

class State(TypedDict):
    i: int
    n: int

def step(state):
    return {"i": state["i"] + 1}

def route(state):
    return "step" if state["i"] < state["n"] else END

builder = StateGraph(State)
builder.add_node("step", step)
builder.add_edge(START, "step")
builder.add_conditional_edges("step", route)
count = int(sys.argv[2])
with PostgresSaver.from_conn_string(sys.argv[1]) as saver:
    saver.setup()
    graph = builder.compile(checkpointer=saver)
    def config():
        return {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 10**7}
    graph.invoke({"i": 0, "n": 5}, config(), durability="sync")
    started = time.perf_counter()
    graph.invoke({"i": 0, "n": count}, config(), durability="sync")
    checkpoints = count + 2  # the input, each step, and the end
    print((time.perf_counter() - started) / checkpoints * 1e6, checkpoints)
"""


def _database(admin: str) -> tuple[str, str]:
    name = "phasegraph_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return name, urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))


def _drop(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def _records(url: str, run_id: str, path: Path) -> None:
    """The phasegraph run's step records, length-prefixed, for the raw loop to write."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            b'SELECT record FROM "phasegraph".records WHERE run_id = %s ORDER BY seq',
            (run_id,),
            binary=True,
        ).fetchall()
    path.write_bytes(b"".join(len(r).to_bytes(4, "little") + bytes(r) for (r,) in rows))


class Cases:
    """The argv of each case, and where its per-step figure comes from."""

    def __init__(self, url: str, folder: Path, langgraph: str | None) -> None:
        self.url = url
        self.folder = folder
        self.records = folder / "records.bin"
        self.langgraph = langgraph
        loop = str(HERE / "loop.yaml")
        self.argv = {
            "phasegraph": [sys.executable, "-c", _PHASEGRAPH, url, "{n}", loop],
            "raw psycopg": [sys.executable, "-c", _RAW, url, "{n}", str(self.records)],
        }
        if langgraph:
            self.argv["LangGraph PostgresSaver"] = [langgraph, "-c", _LANGGRAPH, url, "{n}"]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(HERE)}

    def wall(self, case: str, steps: int) -> float:
        argv = [a.replace("{n}", str(steps)) for a in self.argv[case]]
        done = subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, check=True, cwd=HERE
        )
        micros, tag = done.stdout.split()
        if case == "phasegraph" and not self.records.exists():
            _records(self.url, tag, self.records)
        return float(micros)

    def per_step(self, case: str) -> float:
        """Instructions per step: callgrind's count of a long run less a short one's."""
        env = self.env()
        counts = []
        for steps in (SHORT, LONG):
            argv = [a.replace("{n}", str(steps)) for a in self.argv[case]]
            if argv[0] == sys.executable:
                counts.append(instructions(argv[1:], env, self.folder))
            else:  # another virtualenv's Python
                counts.append(_instructions(argv, env, self.folder))
        return (counts[1] - counts[0]) / (LONG - SHORT)


def _instructions(argv: list[str], env: dict[str, str], folder: Path) -> int:
    out = folder / "cg-other.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        env=env,
        check=True,
        capture_output=True,
    )
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary in callgrind's output for {argv[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument(
        "--langgraph", metavar="PYTHON", help="a Python with langgraph-checkpoint-postgres"
    )
    args = parser.parse_args()
    name, url = _database(args.postgres)
    try:
        with tempfile.TemporaryDirectory(prefix="pg-step-") as tmp:
            cases = Cases(url, Path(tmp), args.langgraph)
            walls: dict[str, list[float]] = {case: [] for case in cases.argv}
            cases.wall("phasegraph", 50)  # the records the raw loop writes
            for _ in range(args.rounds):
                for case in cases.argv:
                    walls[case].append(cases.wall(case, args.steps))
            _report(
                "µs per step (median, wall, loopback)",
                {case: statistics.median(values) for case, values in walls.items()},
            )
            if args.callgrind:
                _report(
                    "instructions per step (client, callgrind)",
                    {case: cases.per_step(case) for case in cases.argv},
                )
    finally:
        _drop(args.postgres, name)
    print(
        f"Python {sys.version.split()[0]}, psycopg {psycopg.__version__}, "
        f"{time.strftime('%Y-%m-%d')}"
    )


def _report(title: str, figures: dict[str, float]) -> None:
    base = figures["phasegraph"]
    print(title)
    for case, value in figures.items():
        ratio = "" if case == "phasegraph" else f"  (phasegraph / this: {base / value:.2f}x)"
        print(f"  {case:<26} {value:>12,.1f}{ratio}")


if __name__ == "__main__":
    main()
