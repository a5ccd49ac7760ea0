"""Finished runs leave nothing behind: a process may drive any number of runs in turn."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections import Counter

from builders import engine, graph, loop_machine, prepared
from phasegraph.actions import Action, ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.core._graph import Frontier
from phasegraph.model import NodeDef, NodeState, RunState, RunStatus, StepRecord
from phasegraph.run import PreparedGraph, Run
from phasegraph.store.memory import MemoryStore

RUNS = 1000


async def _loop(ctx: ActionContext) -> ActionResult:
    await asyncio.sleep(0)  # concurrent runs are in flight together
    return ActionResult(trigger="again" if ctx.counters.get("steps", 0) < 3 else "stop")


async def _concurrently(pg: Engine, plan: PreparedGraph, runs: int) -> set[RunStatus]:
    states = await asyncio.gather(*(pg.run(plan) for _ in range(runs)))
    return {state.status for state in states}


def _plan(action: Action) -> PreparedGraph:
    """A graph of one looping node whose action is ``action``."""
    node = NodeDef(id="loop", machine="loop")
    return prepared(graph([node], machines=[loop_machine()]), {("loop", "work"): action})


def _live(*kinds: type) -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds))


async def test_driving_many_runs_leaves_the_collector_alone() -> None:
    """The library never tunes the collector (``phasegraph.cli.tune_collector`` is opt-in)."""
    thresholds, frozen, enabled = gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()
    seen: list[tuple[tuple[int, ...], int]] = []
    arrived, together = [0], asyncio.Event()
    runs = 300  # past any count of runs in flight a library might call busy

    async def sample(ctx: ActionContext) -> ActionResult:
        arrived[0] += 1
        if arrived[0] == runs:  # every run in flight at once: look at the collector now
            seen.append((gc.get_threshold(), gc.get_freeze_count()))
            together.set()
        await together.wait()
        return ActionResult(trigger="stop")

    async with MemoryStore() as store:
        assert await _concurrently(engine(store), _plan(sample), runs) == {RunStatus.COMPLETED}
    assert seen == [(thresholds, frozen)]
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == (
        thresholds,
        frozen,
        enabled,
    )


async def test_a_thousand_finished_runs_leave_no_run_objects_behind() -> None:
    plan = _plan(_loop)
    kinds = (Run, Frontier, RunState, StepRecord, NodeState, asyncio.Task)
    async with MemoryStore() as store:
        pg = engine(store)
        # Every path once (caches of the prepared graph are filled), several runs at once.
        assert await _concurrently(pg, plan, 8) == {RunStatus.COMPLETED}
        await asyncio.sleep(0)
        before = _live(*kinds)
        runs: list[weakref.ref[Run]] = []
        for _ in range(RUNS // 2):
            async with pg.start(plan) as run:
                runs.append(weakref.ref(run))
                async for _step in run:
                    pass
            assert run.state.status is RunStatus.COMPLETED
        del run, _step
        assert await _concurrently(pg, plan, RUNS // 2) == {RunStatus.COMPLETED}
        # The loop callback that woke this task still holds the gather's future (and so
        # its results) until the task next yields: let it, so only leaks remain.
        await asyncio.sleep(0)
        assert [ref for ref in runs if ref() is not None] == []
        assert _live(*kinds) == before
        # No lease renewal is left scheduled for a run that is over.
        loop = asyncio.get_running_loop()
        pending = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert len(pending) <= 1, pending  # at most the store's own housekeeping, if any
