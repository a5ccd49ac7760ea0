"""A server without workers drives child runs itself: the ones its runs start, and the ones
a server that stopped had not launched yet."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from builders import TESTS
from phasegraph import Engine, open_store
from phasegraph.events import Event
from phasegraph.model import RunStatus
from phasegraph.server._exec import Executor

MAP = TESTS / "fixtures" / "children" / "map.yaml"


def ends(engine: Engine) -> tuple[asyncio.Queue[str], Callable[[], None]]:
    """The ids of the runs the engine drives to an end, as they end (and how to stop)."""
    ended: asyncio.Queue[str] = asyncio.Queue()

    def seen(event: Event) -> None:
        if event.kind in {"run_completed", "run_failed", "run_cancelled"}:
            ended.put_nowait(event.run_id)

    return ended, engine.bus.subscribe(seen)


async def until(ended: asyncio.Queue[str], run_id: str) -> None:
    """Until ``run_id`` ended (the test fails after a minute without)."""
    async with asyncio.timeout(60):
        while await ended.get() != run_id:
            pass


async def test_a_run_the_server_starts_has_its_child_runs_driven_there_too() -> None:
    async with open_store("memory://") as store:
        engine = Engine(store)
        executor = Executor(engine)
        ended, stop = ends(engine)
        executor.start()
        try:
            started = await executor.create(engine.prepare(MAP), {"n": 4, "width": 2}, None)
            await until(ended, started.run_id)
        finally:
            stop()
            await executor.aclose()
        state = await engine.get(started.run_id)
    assert state.status is RunStatus.COMPLETED
    assert state.data["outs"] == [{"value": item} for item in range(4)]


async def test_a_restarted_server_launches_the_child_runs_a_waiting_run_was_left_with() -> None:
    async with open_store("memory://") as store:
        engine = Engine(store)
        # Its gates committed, its children never launched: as a server killed right then.
        left = await engine.run(MAP, {"n": 3, "width": 3})
        assert left.status is RunStatus.WAITING
        executor = Executor(engine)
        ended, stop = ends(engine)
        executor.start()
        try:
            await until(ended, left.run_id)
        finally:
            stop()
            await executor.aclose()
        state = await engine.get(left.run_id)
    assert state.status is RunStatus.COMPLETED
    assert state.data["outs"] == [{"value": item} for item in range(3)]
