"""phasegraph side by side with LangGraph and Burr, and against the Redis floor.

Run from the repository root, in one process and one invocation (needs the ``bench``
extra and a Redis at the URL; keys go under a throwaway prefix, deleted afterwards)::

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/compare.py [--repeat 7] [--redis redis://127.0.0.1:6379/0]

Workloads (every number is a median of ``--repeat`` runs, taken round robin so that any
drift of the machine hits every system alike):

* a ``--steps``-iteration loop with tiny state, then with 10 KB and 100 KB of data no
  step changes: µs per committed step, payload and written bytes per step, on
  phasegraph (memory, SQLite, Redis), LangGraph (InMemorySaver, SqliteSaver), Burr (no
  persister, SQLitePersister, RedisPersister) and the floor (msgpack + one SET);
* a 100-node DAG in 10 layers at concurrency 3 (phasegraph, LangGraph);
* after a ``--resume-steps`` run: reading it at its head, opening it to step on, and
  listing its whole history (SQLite and Redis);
* ``--runs`` concurrent small runs on Redis with one shared Engine: committed steps/s.

The tables are printed and written to ``--out`` (default ``benchmarks/results.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
from bench_burr import Burr
from bench_common import Latency, Result, machine_facts, measure
from bench_floor import Floor
from bench_langgraph import LangGraph
from bench_phasegraph import Phasegraph
from bench_report import Target, dag_table, latency_table, loop_table, targets_table

SIZES = {"tiny state": 0, "10 KB unchanged": 10 * 1024, "100 KB unchanged": 100 * 1024}


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="loop length")
    parser.add_argument("--repeat", type=int, default=7, help="runs per median")
    parser.add_argument("--resume-steps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs on Redis")
    parser.add_argument("--run-steps", type=int, default=4, help="loop length of each such run")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    return parser.parse_args()


class Suite:
    """Holds the three systems and every result, in the order the tables show them."""

    def __init__(self, args: argparse.Namespace, runner: asyncio.Runner, tmp: Path) -> None:
        self.args = args
        self.runner = runner
        self.prefix = "pgcmp" + uuid.uuid4().hex[:8]
        self.pg = Phasegraph(runner, tmp, args.redis, self.prefix)
        self.lg = LangGraph(tmp)
        self.burr = Burr(tmp, args.redis, self.prefix)
        self.floor = Floor(runner, args.redis, f"{self.prefix}:floor")
        self.loops: dict[str, list[Result]] = {}
        self.dag: list[Result] = []
        self.resume: list[Latency] = []
        self.many: list[Latency] = []

    def run(self) -> None:
        args = self.args
        for label, size in SIZES.items():
            section = f"loop {args.steps} steps, {label}"
            _log(f"{section} ...")
            cases = [
                *self.pg.loop_cases(args.steps, size),
                *self.lg.loop_cases(args.steps, size),
                *self.burr.loop_cases(args.steps, size),
                *self.floor.cases(self.pg.sample_state(args.steps, size), args.steps),
            ]
            rows = measure(section, cases, args.repeat, _log)
            self.loops[section] = rows
        _log("DAG 100 nodes in 10 layers, concurrency 3 ...")
        self.dag = measure(
            "DAG 100 nodes", [*self.pg.dag_cases(), *self.lg.dag_cases()], args.repeat, _log
        )
        _log(f"resume and history after {args.resume_steps} steps (builds long runs) ...")
        self.resume = [
            *self.pg.resume(args.resume_steps, args.repeat),
            *self.lg.resume(args.resume_steps, args.repeat),
            *self.burr.resume(args.resume_steps, args.repeat),
        ]
        self.resume.sort(key=lambda r: ("resume" not in r.section, r.section))
        _log(f"{args.runs} concurrent runs on Redis ...")
        self.many = self.pg.concurrent(args.runs, args.run_steps, max(3, args.repeat // 2))

    def close(self) -> None:
        self.lg.close()
        self.burr.close()
        self.floor.close()
        client = redis.Redis.from_url(self.args.redis)
        keys = list(client.scan_iter(match=f"{self.prefix}*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
        client.close()

    # -- report ----------------------------------------------------------------------------

    def _loop(self, label: str, system: str, store: str) -> Result | None:
        rows = self.loops.get(f"loop {self.args.steps} steps, {label}", [])
        return next((r for r in rows if r.system == system and r.store == store), None)

    def _latency(self, section: str, store: str) -> float | None:
        rows = [r for r in self.resume if r.system == "phasegraph" and r.store == store]
        return next((r.value for r in rows if r.section == section), None)

    def targets(self) -> list[Target]:
        def us(label: str, store: str, system: str = "phasegraph") -> float | None:
            row = self._loop(label, system, store)
            return row.us_per_step if row else None

        redis_us = us("tiny state", "Redis")
        big = self._loop("100 KB unchanged", "phasegraph", "Redis")
        big_bytes = big.counted.payload if big and big.counted else None
        targets = [
            Target(
                "memory store, tiny state",
                "≤ 50 µs/step",
                us("tiny state", "memory"),
                50,
                unit="µs/step",
            ),
            Target(
                "SQLite, tiny state (default synchronous=NORMAL)",
                "≤ 300 µs/step",
                us("tiny state", "SQLite"),
                300,
                unit="µs/step",
            ),
            Target(
                "SQLite, tiny state (synchronous=FULL)",
                "≤ 300 µs/step",
                us("tiny state", "SQLite sync=full"),
                300,
                unit="µs/step",
            ),
            Target("Redis, tiny state", "≤ 150 µs/step", redis_us, 150, unit="µs/step"),
        ]
        for floor in ("packb + SET redis.asyncio", "packb + SET redis-py sync"):
            floor_us = us("tiny state", floor, "floor")
            ratio = redis_us / floor_us if redis_us and floor_us else None
            targets.append(Target(f"Redis ÷ floor ({floor})", "≤ 1.3x", ratio, 1.3, unit="x"))
        targets += [
            Target(
                "100 KB unchanged, Redis: payload", "≤ 2 KB/step", big_bytes, 2048, unit="B/step"
            ),
            Target(
                "100 KB unchanged, Redis",
                "≤ 250 µs/step",
                us("100 KB unchanged", "Redis"),
                250,
                unit="µs/step",
            ),
        ]
        for store in ("SQLite", "Redis"):
            n = self.args.resume_steps
            targets += [
                Target(
                    f"resume after {n} steps, {store} (Engine.get)",
                    "≤ 2 ms",
                    self._latency("resume at head", store),
                    2,
                    unit="ms",
                ),
                Target(
                    f"resume after {n} steps, {store} (enter Engine.open, prepared)",
                    "≤ 2 ms",
                    self._latency("open for stepping", store),
                    2,
                    unit="ms",
                ),
                Target(
                    f"resume after {n} steps, {store} (enter Engine.open, by name)",
                    "≤ 2 ms",
                    self._latency("open for stepping, recorded graph", store),
                    2,
                    unit="ms",
                ),
                Target(
                    f"history of {n} steps, {store}",
                    "≤ 50 ms",
                    self._latency("history", store),
                    50,
                    unit="ms",
                ),
            ]
        many = self.many[0].value if self.many else None
        targets.append(
            Target(
                f"{self.args.runs} concurrent runs, Redis (prepared graph)",
                "≥ 5,000 steps/s",
                many,
                5000,
                higher_is_better=True,
                unit="steps/s",
            )
        )
        return targets

    def markdown(self, facts: list[str], took: float) -> str:
        args = self.args
        command = "python benchmarks/compare.py" + (
            f" --repeat {args.repeat}" if args.repeat != 7 else ""
        )
        lines = [
            f"Measured {dt.date.today().isoformat()} with `{command}` in {took:.0f} s "
            f"(one process; medians of {args.repeat} runs, taken round robin).",
            "",
            *[f"- {fact}" for fact in facts],
            "",
            "`phasegraph ÷ this`: phasegraph's median on the matching store divided by "
            "this row's (below 1: phasegraph is faster; for throughput, this row's steps/s "
            "divided by phasegraph's). Payload = bytes handed to the store; written = "
            "growth of the process's `wchar` (SQLite) or of Redis' `total_net_input_bytes` "
            "(Redis), per committed step.",
            "",
        ]
        for section, rows in self.loops.items():
            lines += loop_table(section, rows)
        lines += dag_table("DAG: 100 no-op nodes in 10 layers, concurrency 3", self.dag, nodes=100)
        lines += latency_table(
            f"Resume and history after {args.resume_steps} steps (tiny state)", self.resume
        )
        if self.many:
            lines += latency_table(f"{args.runs} concurrent small runs on Redis", self.many)
        lines += targets_table(self.targets())
        return "\n".join(lines)


def main() -> None:
    args = _args()
    started = time.perf_counter()
    client = redis.Redis.from_url(args.redis)
    facts = machine_facts(client)
    client.close()
    for fact in facts:
        _log(fact)
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        suite = Suite(args, runner, Path(tmp))
        try:
            suite.run()
        finally:
            suite.close()
        text = suite.markdown(facts, time.perf_counter() - started)
    print(text)
    args.out.write_text(text + "\n")
    _log(f"written to {args.out}")


if __name__ == "__main__":
    main()
