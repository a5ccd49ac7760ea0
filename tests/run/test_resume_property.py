"""Property: crash anywhere (in process) + resume == the uninterrupted run.

A crash is simulated by leaving the run's ``async with`` block after ``k`` committed
steps: in-flight actions are cancelled and nothing uncommitted is kept. A fresh engine
(and, for SQLite, a fresh store on the same file, as a new process would have) resumes
the run. The final data, node states, run status and seq must equal those of a run that
was never interrupted.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, graph, loop_machine, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import NodeDef, RunState
from phasegraph.run import PreparedGraph
from phasegraph.store.base import Store
from phasegraph.store.memory import MemoryStore
from phasegraph.store.sqlite import SqliteStore


@dataclass(frozen=True)
class NodePlan:
    """What one node does: loop ``loops`` times (or, as a task, succeed or fail)."""

    machine: str
    needs: tuple[str, ...]
    loops: int
    fails: bool
    yields: int  # event-loop turns each action takes, to vary the interleaving


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[NodeDef], dict[str, NodePlan], int]:
    count = draw(st.integers(1, 5))
    nodes, node_plans = [], {}
    for index in range(count):
        needs = draw(st.lists(st.integers(0, index - 1), unique=True, max_size=2)) if index else []
        node_id = f"n{index}"
        machine = draw(st.sampled_from(["task", "loop"]))
        needed = tuple(f"n{j}" for j in needs)
        nodes.append(NodeDef(id=node_id, machine=machine, needs=needed))
        node_plans[node_id] = NodePlan(
            machine=machine,
            needs=needed,
            loops=draw(st.integers(0, 5)),
            fails=draw(st.booleans()) and draw(st.booleans()),
            yields=draw(st.integers(0, 2)),
        )
    return nodes, node_plans, draw(st.integers(1, 3))


def _action(plan: NodePlan) -> Callable[[ActionContext], object]:
    """A deterministic action: its result depends only on what the context shows."""

    async def act(ctx: ActionContext) -> ActionResult:
        for _ in range(plan.yields):
            await asyncio.sleep(0)
        # Only what the node needs is read: data written by unordered nodes may or may
        # not be there yet, and a result must not depend on timing.
        data = {ctx.node_id: ctx.steps, f"{ctx.node_id}_in": [ctx.data[n] for n in plan.needs]}
        if plan.machine == "task":
            return ActionResult(trigger="fail" if plan.fails else "ok", data=data)
        return ActionResult(trigger="again" if ctx.steps < plan.loops else "stop", data=data)

    return act


def _prepare(nodes: list[NodeDef], node_plans: dict[str, NodePlan], concurrency: int):
    # A small steps budget, so that some loops run out of it (node fails as exhausted).
    definition = graph(nodes, machines=[loop_machine(limit=4)], concurrency=concurrency)
    actions = {
        (node_id, "run" if plan.machine == "task" else "work"): _action(plan)
        for node_id, plan in node_plans.items()
    }
    return prepared(definition, actions)


def _outcome(state: RunState) -> tuple[object, ...]:
    nodes = {
        node_id: (node.status, node.path, dict(node.counters), node.steps, node.outcome)
        for node_id, node in state.nodes.items()
    }
    return dict(state.data), nodes, state.status, state.seq


@asynccontextmanager
async def _stores(kind: str) -> AsyncIterator[Callable[[], Store]]:
    """Yield a factory of stores that all see the same runs (a new one per "process")."""
    if kind == "memory":
        shared = MemoryStore()
        yield lambda: shared
        return
    with tempfile.TemporaryDirectory() as tmp:
        opened: list[Store] = []

        def fresh() -> Store:
            opened.append(SqliteStore(Path(tmp) / "runs.db"))
            return opened[-1]

        try:
            yield fresh
        finally:
            for store in opened:
                await store.aclose()


async def _crash_and_resume(
    plan: PreparedGraph, new_store: Callable[[], Store], crashes: list[int]
) -> RunState:
    # Distinct run ids: each engine counts ids from 1, and a seq-0 commit identical to a
    # stored one (same fake clock) would count as a retry of that run's creation.
    async with engine(new_store()).start(plan, run_id="crashed") as run:
        run_id = run.run_id
        for _ in range(crashes[0]):
            await run.next()
    for steps in crashes[1:]:
        async with engine(new_store()).open(run_id, graph=plan) as run:
            for _ in range(steps):
                await run.next()
    state = await engine(new_store()).get(run_id)
    if state.status.terminal:
        return state  # it finished before the last crash: nothing left to resume
    return await engine(new_store()).resume(run_id, graph=plan)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    shape=plans(),
    kind=st.sampled_from(["memory", "sqlite"]),
    crashes=st.lists(st.integers(0, 30), min_size=1, max_size=3),
)
def test_crash_then_resume_equals_uninterrupted_run(shape, kind, crashes):
    nodes, node_plans, concurrency = shape
    plan = _prepare(nodes, node_plans, concurrency)

    async def scenario() -> tuple[RunState, RunState]:
        async with _stores(kind) as new_store:
            whole = await engine(new_store()).run(plan, run_id="whole")
            resumed = await _crash_and_resume(plan, new_store, crashes)
            return whole, resumed

    whole, resumed = asyncio.run(scenario())
    assert whole.status.terminal
    assert _outcome(resumed) == _outcome(whole)
