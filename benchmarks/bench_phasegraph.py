"""phasegraph's side of ``compare.py``: the loop, the DAG, resume/history and many runs.

Everything goes through the public API (``Engine``, ``open_store``), one asyncio loop
(an ``asyncio.Runner``) for the whole benchmark. Graphs are compiled before the clock
starts and each store is connected before the clock starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import redis
from bench_common import Case, Counted, Latency, Timed, latency, redis_bytes_in, wchar
from bytes_per_step import CountingStore

from phasegraph import Engine, RunState, Store, open_store

__all__ = ["Phasegraph"]

T = TypeVar("T")
LOOP = Path(__file__).with_name("loop.yaml")
SYSTEM = "phasegraph"
NOTES = {
    "memory": "",
    "SQLite": "WAL, synchronous=NORMAL (the default)",
    "SQLite sync=full": "WAL, ?synchronous=full",
    "Redis": "one EVALSHA per commit, on the one shared connection",
}


def _completed(state: RunState) -> bool:
    return str(state.status) == "completed"


def _check(state: RunState) -> RunState:
    if not _completed(state):
        raise SystemExit(f"phasegraph benchmark run {state.run_id} ended {state.status}")
    return state


def dag_yaml(layers: int, width: int, concurrency: int) -> str:
    """A graph of ``layers`` x ``width`` one-shot nodes; each needs the whole layer before."""
    lines = [
        f"graph: bench_dag_{layers}x{width}",
        f"concurrency: {concurrency}",
        "nodes:",
    ]
    for layer in range(layers):
        for k in range(width):
            lines += [f"  - id: n{layer}_{k}", "    machine: task"]
            if layer:
                needs = ", ".join(f"n{layer - 1}_{j}" for j in range(width))
                lines.append(f"    needs: [{needs}]")
            lines.append('    bind: {run: {python: "loop_actions:ok", triggers: [ok]}}')
    return "\n".join(lines) + "\n"


class Phasegraph:
    """Builds the phasegraph cases of each workload."""

    def __init__(self, runner: asyncio.Runner, tmp: Path, redis_url: str, prefix: str) -> None:
        self.runner = runner
        self.tmp = tmp
        self.redis_url = redis_url
        self.prefix = prefix
        self.client = redis.Redis.from_url(redis_url)
        self.urls = {
            "memory": "memory://",
            "SQLite": f"sqlite:///{tmp}/phasegraph.db",
            "SQLite sync=full": f"sqlite:///{tmp}/phasegraph-full.db?synchronous=full",
            "Redis": self._redis(),
        }
        self.dag_path = tmp / "dag.yaml"
        self.dag_path.write_text(dag_yaml(10, 10, 3))

    def _redis(self, extra: str = "") -> str:
        joiner = "&" if "?" in self.redis_url else "?"
        return f"{self.redis_url}{joiner}prefix={self.prefix}{extra}"

    def _sync(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return self.runner.run(make())

    # -- the loop and the DAG --------------------------------------------------------------

    async def _timed(self, url: str, graph: Path, run_input: dict[str, Any]) -> Timed:
        async with open_store(url) as store:
            engine = Engine(store)
            prepared = engine.prepare(graph)  # compiled once, outside the clock
            await store.list_runs(limit=1)  # connect outside the clock
            started = time.perf_counter()
            state = _check(await engine.run(prepared, run_input))
            elapsed = time.perf_counter() - started
        return Timed(elapsed, state.seq)

    async def _counted(self, url: str, run_input: dict[str, Any]) -> Counted:
        async with open_store(url) as inner:
            store = CountingStore(inner)
            engine = Engine(store)
            prepared = engine.prepare(LOOP)
            await inner.list_runs(limit=1)
            written_before, net_before = wchar(), redis_bytes_in(self.client)
            state = _check(await engine.run(prepared, run_input))
            written, net = wchar() - written_before, redis_bytes_in(self.client) - net_before
        payload = (store.record_bytes + store.snapshot_bytes) / state.seq
        if url.startswith("memory"):
            return Counted(payload, None)
        return Counted(payload, (net if url.startswith("redis") else written) / state.seq)

    def sample_state(self, steps: int, size: int) -> RunState:
        """The final state of the loop with ``size`` bytes of unchanged data (memory store)."""

        async def run() -> RunState:
            async with open_store("memory://") as store:
                engine = Engine(store)
                return _check(
                    await engine.run(engine.prepare(LOOP), {"steps": steps, "blob": "x" * size})
                )

        return self._sync(run)

    def loop_cases(self, steps: int, size: int) -> list[Case]:
        """The ``steps``-iteration loop with ``size`` bytes of unchanged data, on each store."""
        run_input = {"steps": steps, "blob": "x" * size}
        cases = []
        for store, url in self.urls.items():
            cases.append(
                Case(
                    SYSTEM,
                    store,
                    run=lambda url=url: self._sync(lambda: self._timed(url, LOOP, run_input)),
                    count=lambda url=url: self._sync(lambda: self._counted(url, run_input)),
                    peer=store,
                    note=NOTES[store],
                )
            )
        return cases

    def dag_cases(self) -> list[Case]:
        """The 100-node, 10-layer DAG at concurrency 3, on each store."""
        return [
            Case(
                SYSTEM,
                store,
                run=lambda url=url: self._sync(lambda: self._timed(url, self.dag_path, {})),
                peer=store,
                note="no-op actions; 2 steps per node (start, ok)",
            )
            for store, url in self.urls.items()
            if store != "SQLite sync=full"
        ]

    # -- resume and history ----------------------------------------------------------------

    async def _long_run(self, store: Store, steps: int) -> str:
        engine = Engine(store)
        return _check(await engine.run(engine.prepare(LOOP), {"steps": steps})).run_id

    async def _resume_samples(self, url: str, steps: int, repeat: int) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"get": [], "open": [], "open by name": [], "history": []}
        async with open_store(url) as store:
            run_id = await self._long_run(store, steps)
            engine = Engine(store)
            prepared = engine.prepare(LOOP)
            await engine.get(run_id)  # connect
            for _ in range(repeat):
                started = time.perf_counter()
                await engine.get(run_id)
                times["get"].append(time.perf_counter() - started)
                for key, graph in (("open", prepared), ("open by name", None)):
                    opening = engine.open(run_id, graph=graph)
                    started = time.perf_counter()
                    await opening.__aenter__()
                    times[key].append(time.perf_counter() - started)
                    await opening.__aexit__(None, None, None)
                started = time.perf_counter()
                records = await engine.history(run_id)
                times["history"].append(time.perf_counter() - started)
                if len(records) != steps + 2:
                    raise SystemExit(f"history has {len(records)} records, not {steps + 2}")
        return {k: [s * 1e3 for s in v] for k, v in times.items()}

    def resume(self, steps: int, repeat: int) -> list[Latency]:
        """Head read, open and full history of a ``steps``-step run on SQLite and Redis."""
        rows = []
        for store in ("SQLite", "Redis"):
            times = self._sync(lambda s=store: self._resume_samples(self.urls[s], steps, repeat))
            rows += [
                latency(
                    "resume at head",
                    SYSTEM,
                    store,
                    times["get"],
                    peer=store,
                    note="Engine.get(run_id): head snapshot + records since",
                ),
                latency(
                    "open for stepping",
                    SYSTEM,
                    store,
                    times["open"],
                    peer=store,
                    note="entering Engine.open(run_id, graph=prepared): read, lease, read again",
                ),
                latency(
                    "open for stepping, recorded graph",
                    SYSTEM,
                    store,
                    times["open by name"],
                    peer=store,
                    note="entering Engine.open(run_id): also re-reads the graph's YAML",
                ),
                latency(
                    "history",
                    SYSTEM,
                    store,
                    times["history"],
                    peer=store,
                    note=f"Engine.history: {steps + 2} decoded records",
                ),
            ]
        return rows

    # -- many concurrent runs --------------------------------------------------------------

    async def _many(
        self, runs: int, steps: int, by_path: bool, rounds: int
    ) -> list[tuple[float, list[str]]]:
        """Per round: committed steps/s of the runs that completed, what the others raised.

        All rounds share one store (one connection, opened by the first command).
        """
        url = self._redis()
        out = []
        async with open_store(url) as store:
            engine = Engine(store)
            prepared = engine.prepare(LOOP)
            graph = LOOP if by_path else prepared
            await store.list_runs(limit=1)
            for _ in range(rounds):
                started = time.perf_counter()
                outcomes = await asyncio.gather(
                    *(engine.run(graph, {"steps": steps}) for _ in range(runs)),
                    return_exceptions=True,
                )
                elapsed = time.perf_counter() - started
                done = [o for o in outcomes if isinstance(o, RunState) and _completed(o)]
                failed = [type(o).__name__ for o in outcomes if not isinstance(o, RunState)]
                out.append((sum(state.seq for state in done) / elapsed, failed))
        return out

    def concurrent(self, runs: int, steps: int, rounds: int) -> list[Latency]:
        """Aggregate committed steps/s of ``runs`` concurrent small runs sharing one Engine.

        With the graph prepared beforehand (as a server that compiles it once): the first
        round (the store connects) and the median of the others. Then with
        the graph named by its path (``Engine.run`` re-reads the file for every run). A
        run that raises is not counted, and the note says how many did and what.
        """
        base = (
            f"asyncio.gather of {runs} Engine.run, loop of {steps} ({steps + 1} steps "
            "each), one store"
        )
        warm = self._sync(lambda: self._many(runs, steps, False, rounds + 1))
        by_path = self._sync(lambda: self._many(runs, steps, True, 2))
        variants = {
            "prepared graph": (warm[1:], f"median of {rounds} rounds after the first"),
            "prepared graph, first round": (warm[:1], "first round: the store connects"),
            "graph by path, first round": (by_path[:1], "first round"),
            "graph by path": (by_path[1:], "second round"),
        }
        rows = []
        for label, (outcomes, how) in variants.items():
            failed = [name for _, names in outcomes for name in names]
            note = f"{base}; {how}"
            if failed:
                kinds = ", ".join(f"{failed.count(k)} {k}" for k in sorted(set(failed)))
                note += f"; FAILED runs: {kinds}"
            rows.append(
                latency(
                    f"{runs} concurrent runs, {label}",
                    SYSTEM,
                    "Redis",
                    [rate for rate, _ in outcomes],
                    unit="steps/s",
                    peer="Redis",
                    note=note,
                )
            )
        return rows
