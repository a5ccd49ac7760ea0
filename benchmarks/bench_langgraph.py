"""LangGraph's side of ``compare.py``: the same loop and DAG with InMemorySaver and SqliteSaver.

The loop is one node that adds 1 to ``i`` and a conditional edge back to itself until
``i == n``; the unchanged data is a string channel ``blob`` that no step writes. The loop
runs in both durability modes: ``durability="sync"`` (each checkpoint is written before
the next superstep starts, like phasegraph's commit per step) and LangGraph's default
``"async"`` (the checkpoint is written while the next superstep runs, so a crash may lose
the last steps). The DAG and resume use ``"sync"``. Recursion limits are above the loop
length. SqliteSaver
runs on its own ``sqlite3`` connection with LangGraph's defaults (WAL; the SQLite default
``synchronous=FULL``). Graphs are compiled before the clock starts.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict

from bench_common import Case, Counted, Latency, Timed, latency, wchar
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

__all__ = ["LangGraph"]

SYSTEM = "LangGraph"


class LoopState(TypedDict):
    i: int
    n: int
    blob: str


class DagState(TypedDict, total=False):
    x: int


class CountingSerde(JsonPlusSerializer):
    """Counts the bytes LangGraph serializes for its saver (checkpoints, blobs, writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        self.bytes += len(data)
        return kind, data


def _step(state: LoopState) -> dict[str, int]:
    return {"i": state["i"] + 1}


def _route(state: LoopState) -> str:
    return "step" if state["i"] < state["n"] else END


def _noop(state: DagState) -> dict[str, int]:
    return {}


def loop_graph() -> StateGraph:
    builder = StateGraph(LoopState)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", _route)
    return builder


def dag_graph(layers: int, width: int) -> StateGraph:
    """``layers`` x ``width`` no-op nodes; each waits for the whole layer before it."""
    builder = StateGraph(DagState)
    for layer in range(layers):
        for k in range(width):
            builder.add_node(f"n{layer}_{k}", _noop)
    for k in range(width):
        builder.add_edge(START, f"n0_{k}")
        for layer in range(1, layers):
            builder.add_edge([f"n{layer - 1}_{j}" for j in range(width)], f"n{layer}_{k}")
        builder.add_edge(f"n{layers - 1}_{k}", END)
    return builder


def _config(thread: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 10**7, **extra}


Durability = Literal["sync", "async"]
DURABILITY: dict[Durability, str] = {
    "sync": "each checkpoint written before the next step starts (as phasegraph commits)",
    "async": "LangGraph's default: a step's checkpoint is written while the next step runs",
}


class LangGraph:
    """Builds the LangGraph cases of each workload."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "langgraph.db"
        self.conn = sqlite3.connect(self.db, check_same_thread=False)
        self.sqlite = SqliteSaver(self.conn)
        self.sqlite.setup()
        self.loop = loop_graph()
        self.dag = dag_graph(10, 10)

    def close(self) -> None:
        self.conn.close()

    def _saver(self, store: str) -> BaseCheckpointSaver[Any]:
        return InMemorySaver() if store == "memory" else self.sqlite

    def _timed_loop(self, store: str, steps: int, blob: str, durability: Durability) -> Timed:
        app = self.loop.compile(checkpointer=self._saver(store))
        thread = uuid.uuid4().hex
        started = time.perf_counter()
        out = app.invoke({"i": 0, "n": steps, "blob": blob}, _config(thread), durability=durability)
        elapsed = time.perf_counter() - started
        if out["i"] != steps:
            raise SystemExit(f"LangGraph loop ended at i={out['i']}")
        return Timed(elapsed, steps + 2)  # the input checkpoint + one per superstep

    def _counted_loop(self, store: str, steps: int, blob: str, durability: Durability) -> Counted:
        serde = CountingSerde()
        saver: BaseCheckpointSaver[Any] = (
            InMemorySaver(serde=serde) if store == "memory" else SqliteSaver(self.conn)
        )
        app = self.loop.compile(checkpointer=saver)
        thread = uuid.uuid4().hex
        before = wchar()
        app.invoke({"i": 0, "n": steps, "blob": blob}, _config(thread), durability=durability)
        written = wchar() - before
        checkpoints = len(list(saver.list({"configurable": {"thread_id": thread}})))
        if store == "memory":
            return Counted(serde.bytes / checkpoints, None)
        return Counted(self._table_bytes(thread) / checkpoints, written / checkpoints)

    def _table_bytes(self, thread: str) -> int:
        (checkpoints,) = self.conn.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints"
            " WHERE thread_id = ?",
            (thread,),
        ).fetchone()
        (writes,) = self.conn.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?", (thread,)
        ).fetchone()
        return int(checkpoints) + int(writes)

    def loop_cases(self, steps: int, size: int) -> list[Case]:
        """The loop on InMemorySaver and SqliteSaver, in both durability modes."""
        blob = "x" * size
        cases = []
        for store in ("memory", "SQLite"):
            saver = "InMemorySaver" if store == "memory" else "SqliteSaver"
            for durability in DURABILITY:
                cases.append(
                    Case(
                        SYSTEM,
                        f"{saver}, durability={durability}",
                        run=lambda s=store, d=durability: self._timed_loop(s, steps, blob, d),
                        count=lambda s=store, d=durability: self._counted_loop(s, steps, blob, d),
                        peer=store,
                        note=DURABILITY[durability]
                        + (", WAL, synchronous=FULL" if store == "SQLite" else ""),
                    )
                )
        return cases

    def _timed_dag(self, store: str) -> Timed:
        app = self.dag.compile(checkpointer=self._saver(store))
        started = time.perf_counter()
        app.invoke({"x": 0}, _config(uuid.uuid4().hex, max_concurrency=3), durability="sync")
        return Timed(time.perf_counter() - started, 100)

    def dag_cases(self) -> list[Case]:
        """The 100-node DAG with ``max_concurrency=3``."""
        return [
            Case(
                SYSTEM,
                "InMemorySaver" if store == "memory" else "SqliteSaver",
                run=lambda store=store: self._timed_dag(store),
                peer=store,
                note="durability=sync; max_concurrency=3; one checkpoint per layer (superstep)",
            )
            for store in ("memory", "SQLite")
        ]

    def resume(self, steps: int, repeat: int) -> list[Latency]:
        """State at the head and the full state history of a ``steps``-step thread."""
        app = self.loop.compile(checkpointer=self.sqlite)
        thread = uuid.uuid4().hex
        app.invoke({"i": 0, "n": steps, "blob": ""}, _config(thread), durability="sync")
        config = _config(thread)

        def timed(call: Callable[[], Any]) -> float:
            started = time.perf_counter()
            call()
            return (time.perf_counter() - started) * 1e3

        head = [timed(lambda: app.get_state(config)) for _ in range(repeat)]
        history = [timed(lambda: list(app.get_state_history(config))) for _ in range(repeat)]
        count = len(list(app.get_state_history(config)))
        return [
            latency(
                "resume at head",
                SYSTEM,
                "SqliteSaver",
                head,
                peer="SQLite",
                note="app.get_state(config)",
            ),
            latency(
                "history",
                SYSTEM,
                "SqliteSaver",
                history,
                peer="SQLite",
                note=f"list(app.get_state_history(config)): {count} snapshots",
            ),
        ]
