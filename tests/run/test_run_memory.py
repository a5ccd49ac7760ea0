"""Finished runs leave nothing behind: a process may drive any number of runs in turn."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections import Counter
from collections.abc import Iterator

import pytest

from builders import engine, graph, loop_machine, prepared
from phasegraph.actions import Action, ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.core._graph import Frontier
from phasegraph.model import NodeDef, NodeState, RunState, RunStatus, StepRecord
from phasegraph.run import PreparedGraph, Run, _collector
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


async def _with_the_collector_off(pg: Engine, plan: PreparedGraph) -> None:
    """Enough runs in flight to freeze, while the collector is disabled: nothing frozen."""
    gc.disable()
    try:
        assert await _concurrently(pg, plan, _collector.FREEZE_AT) == {RunStatus.COMPLETED}
    finally:
        gc.enable()
    assert gc.get_freeze_count() == 0


def _live(*kinds: type) -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds))


@pytest.fixture
def collector() -> Iterator[None]:
    """Nothing frozen and the start-up thresholds to begin with (another test may have
    tuned the collector), and the same after."""
    gc.unfreeze()
    _collector._STATE.ours = False
    gc.set_threshold(*_collector._DEFAULT_THRESHOLDS)
    yield
    gc.unfreeze()
    gc.set_threshold(*_collector._DEFAULT_THRESHOLDS)


def _sampling_plan(
    runs: int, seen: list[tuple[int, ...]], then: tuple[int, int, int] | None = None
) -> PreparedGraph:
    """A one-step graph whose actions note the collector's thresholds once ``runs`` of
    them are in flight together (and then set them to ``then``, as an application may)."""
    arrived, together = [0], asyncio.Event()

    async def sample(ctx: ActionContext) -> ActionResult:
        arrived[0] += 1
        if arrived[0] == runs:
            seen.append(gc.get_threshold())
            if then is not None:
                gc.set_threshold(*then)
            together.set()
        await together.wait()
        return ActionResult(trigger="stop")

    return _plan(sample)


@pytest.mark.usefixtures("collector")
async def test_young_collections_are_rarer_only_while_many_runs_are_in_flight() -> None:
    seen: list[tuple[int, ...]] = []
    async with MemoryStore() as store:
        pg = engine(store)
        few = _sampling_plan(_collector.BUSY_AT - 1, seen)
        assert await _concurrently(pg, few, _collector.BUSY_AT - 1) == {RunStatus.COMPLETED}
        many = _sampling_plan(_collector.BUSY_AT, seen)
        assert await _concurrently(pg, many, _collector.BUSY_AT) == {RunStatus.COMPLETED}
    assert seen == [_collector._DEFAULT_THRESHOLDS, _collector.BUSY_THRESHOLDS]
    assert gc.get_threshold() == _collector._DEFAULT_THRESHOLDS  # put back once all left


@pytest.mark.usefixtures("collector")
async def test_thresholds_the_application_set_are_left_alone() -> None:
    seen: list[tuple[int, ...]] = []
    async with MemoryStore() as store:
        pg = engine(store)
        gc.set_threshold(1_000, 15, 15)
        plan = _sampling_plan(_collector.BUSY_AT, seen)
        assert await _concurrently(pg, plan, _collector.BUSY_AT) == {RunStatus.COMPLETED}
        assert seen == [(1_000, 15, 15)]
        assert gc.get_threshold() == (1_000, 15, 15)
        # Changed by the application while the runs were in flight: not put back either.
        gc.set_threshold(*_collector._DEFAULT_THRESHOLDS)
        plan = _sampling_plan(_collector.BUSY_AT, seen, then=(2_000, 10, 10))
        assert await _concurrently(pg, plan, _collector.BUSY_AT) == {RunStatus.COMPLETED}
        assert seen[-1] == _collector.BUSY_THRESHOLDS
    assert gc.get_threshold() == (2_000, 10, 10)


@pytest.mark.usefixtures("collector")
async def test_a_thousand_finished_runs_leave_no_run_objects_behind() -> None:
    """Also once compiled graphs were frozen: runs started later are collected as usual."""
    plan = _plan(_loop)
    kinds = (Run, Frontier, RunState, StepRecord, NodeState, asyncio.Task)
    async with MemoryStore() as store:
        pg = engine(store)
        # Every path once (caches of the prepared graph are filled), with enough runs in
        # flight at once to freeze the compiled graph.
        assert await _concurrently(pg, plan, _collector.FREEZE_AT) == {RunStatus.COMPLETED}
        await asyncio.sleep(0)
        assert gc.get_freeze_count() > 0
        assert not any(o is plan for o in gc.get_objects())  # frozen: never walked again
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


@pytest.mark.usefixtures("collector")
async def test_graphs_are_not_frozen_while_few_runs_are_in_flight() -> None:
    plan = _plan(_loop)
    async with MemoryStore() as store:
        pg = engine(store)
        assert await _concurrently(pg, plan, _collector.FREEZE_AT - 1) == {RunStatus.COMPLETED}
        for _ in range(3):
            await pg.run(plan)
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("collector")
async def test_nothing_is_frozen_while_the_application_runs_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = _plan(_loop)
    async with MemoryStore() as store:
        pg = engine(store)
        await _with_the_collector_off(pg, plan)
        # A freeze made by the application is left alone.
        _plan(_loop)  # compiled again: a freeze is due
        gc.freeze()
        touched: list[str] = []
        monkeypatch.setattr(gc, "unfreeze", lambda: touched.append("unfreeze"))
        monkeypatch.setattr(gc, "collect", lambda *_: touched.append("collect") or 0)
        assert await _concurrently(pg, plan, _collector.FREEZE_AT) == {RunStatus.COMPLETED}
        assert touched == []


@pytest.mark.usefixtures("collector")
async def test_a_graph_compiled_while_the_collector_was_off_is_frozen_once_it_is_on() -> None:
    plan = _plan(_loop)
    async with MemoryStore() as store:
        pg = engine(store)
        await _with_the_collector_off(pg, plan)
        assert await _concurrently(pg, plan, _collector.FREEZE_AT) == {RunStatus.COMPLETED}
    assert gc.get_freeze_count() > 0
