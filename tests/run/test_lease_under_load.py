"""Runs keep their leases however busy the event loop is, and nobody else wants them.

* Thousands of runs in flight on one Redis: every run's commits and the keeper's
  renewals compete with the other runs' steps on one event loop, for longer than a lease.
* Ten thousand runs starting at once on one Redis, on a store that has not connected
  yet: the first start opens the connection while the others keep the loop busy.
* One run stepping without ever suspending (the memory store's and SQLite's commits
  need no await), for many lease lengths.

No run may be stopped or thrown away: a lease that lapses while nobody takes the run is
still the run's, and the next commit takes it again.
"""

from __future__ import annotations

import asyncio

import pytest

from builders import engine, graph, loop_machine, prepared, returning
from phasegraph import Engine, open_store
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import RunStatus
from phasegraph.testing import isolated_redis_store, isolated_redis_url

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


STARTS = 10_000


async def test_ten_thousand_concurrent_starts_on_one_redis_all_start(redis_url: str) -> None:
    """Every start commits its run, though the first connect cannot be seen to open in time.

    The starts share one store that has not connected yet: the first opens the
    connection, and before the event loop looks at the socket again it runs every other
    start up to its own wait for that connection (each builds and encodes its run first),
    which takes far longer than the 50 ms allowed here to connect — as the default 5 s
    was outlasted by 10,000 starts on a loaded machine. That attempt times out; it is
    made again within the lease's patience, not given up with the run. Kept cheap: a
    start commits seq 0 and gives its lease back, a quarter to half a millisecond of
    work each (the starts take 2 to 7 s on one core, more beside a loaded machine).
    """
    plan = prepared(graph([("a", [])]), {("a", "run"): returning("ok")})

    async def start(eng: Engine) -> str:
        async with eng.start(plan) as run:
            return run.run_id

    async with (
        isolated_redis_url(redis_url, socket_connect_timeout="0.05") as url,
        open_store(url) as store,
    ):
        eng = engine(store)
        started = await asyncio.gather(*(start(eng) for _ in range(STARTS)))
        listed = await store.list_runs(limit=STARTS + 1)
    assert len(set(started)) == STARTS
    assert {meta.run_id for meta in listed} == set(started)
    assert {(meta.status, meta.seq) for meta in listed} == {(RunStatus.RUNNING, 0)}


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
