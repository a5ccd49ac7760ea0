"""Runs keep their leases however busy the event loop is, and nobody else wants them.

* Thousands of runs in flight on one Redis: every run's commits and the keeper's
  renewals compete with the other runs' steps on one event loop, for longer than a lease.
* One run stepping without ever suspending (the memory store's and SQLite's commits
  need no await), for many lease lengths.

No run may be stopped or thrown away: a lease that lapses while nobody takes the run is
still the run's, and the next commit takes it again.
"""

from __future__ import annotations

import asyncio

import pytest

from builders import engine, graph, loop_machine, prepared
from phasegraph import open_store
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import RunStatus
from phasegraph.testing import isolated_redis_store

RUNS = 2000


async def test_two_thousand_concurrent_runs_complete_under_a_short_lease(redis_url: str) -> None:
    async def work(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(0)
        return ActionResult(trigger="again" if ctx.steps < 4 else "stop", data={"n": ctx.steps})

    plan = prepared(graph([("a", [])], machine="loop"), {("a", "work"): work})
    async with isolated_redis_store(redis_url) as store:
        eng = engine(store, lease_ttl=0.5)
        states = await asyncio.gather(*(eng.run(plan, run_id=f"r{i}") for i in range(RUNS)))
    assert {state.status for state in states} == {RunStatus.COMPLETED}
    assert {state.seq for state in states} == {states[0].seq}


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_run_that_never_suspends_outlives_its_lease(store_kind: str, tmp_path) -> None:
    """10,000 steps that never give the loop up, under a 0.1 s lease, complete."""

    async def work(ctx: ActionContext) -> ActionResult:  # no await: the loop is never free
        return ActionResult(trigger="again" if ctx.steps < 10_000 else "stop")

    definition = graph([("a", [])], machine="loop", machines=[loop_machine(20_000)])
    plan = prepared(definition, {("a", "work"): work})
    url = "memory://" if store_kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as store:
        state = await engine(store, lease_ttl=0.1).run(plan, run_id="long")
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["a"].steps == 10_001
