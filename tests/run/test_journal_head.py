"""A run whose journal does not end at its head, through the Engine: every call refuses it.

The run is in a memory store, damaged behind its back: the head's record dropped, or the
head seq rolled back. Every read (``get`` at the head or at a seq, ``history``,
``history_json``, ``replay``, ``fork``) and every call that would continue the run
(``resume``, ``reply``, ``cancel``) raises one :class:`JournalHeadError` naming the run
and the head seq, before any action runs or anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.errors import JournalHeadError
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import JournalDamage
from store.journal_damage import MemoryDamage

HEAD = 4

# (damage, the head the metadata names after it, the last record stored after it)
DAMAGE: list[tuple[Callable[[JournalDamage, str], Awaitable[None]], int, int]] = [
    (lambda damage, run_id: damage.drop_last_record(run_id), HEAD, HEAD - 1),
    (lambda damage, run_id: damage.set_head(run_id, HEAD - 1), HEAD - 1, HEAD),
]
IDS = ["last-record-deleted", "head-rolled-back"]


def calls(engine: Engine, run_id: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every Engine call about one run, by name."""
    return {
        "get": lambda: engine.get(run_id),
        "get at 1": lambda: engine.get(run_id, 1),
        "history": lambda: engine.history(run_id),
        "history_json": lambda: engine.history_json(run_id),
        "replay": lambda: engine.replay(run_id),
        "fork": lambda: engine.fork(run_id),
        "resume": lambda: engine.resume(run_id),
        "reply": lambda: engine.reply(run_id, f"{run_id}:a:work", "again"),
        "cancel": lambda: engine.cancel(run_id),
    }


@pytest.mark.parametrize(("damage", "head", "last"), DAMAGE, ids=IDS)
async def test_every_engine_call_refuses_the_run_and_runs_nothing(
    damage: Callable[[JournalDamage, str], Awaitable[None]], head: int, last: int
) -> None:
    marks: list[int] = []

    async def work(ctx: ActionContext) -> ActionResult:
        marks.append(ctx.counters["steps"])
        return ActionResult(trigger="again" if len(marks) < 10 else "stop")

    plan = prepared(graph([("a", [])], machine="loop"), {("a", "work"): work})
    async with MemoryStore() as store:
        runs = engine(store)
        async with runs.start(plan) as run:
            for _ in range(HEAD):
                await run.next()
            run_id = run.run_id
        assert run.state.seq == HEAD
        await damage(MemoryDamage(store), run_id)
        kept = dataclasses.astuple(store._runs[run_id])  # white-box: records, meta, lease
        done = list(marks)
        runs = engine(store)
        for name, call in calls(runs, run_id).items():
            with pytest.raises(JournalHeadError) as caught:
                await call()
            assert (caught.value.run_id, caught.value.seq) == (run_id, head), name
            assert caught.value.last_stored == last, name
            assert str(caught.value).startswith(f"run {run_id!r}: its head is seq {head} but")
        assert marks == done  # no action ran
        assert dataclasses.astuple(store._runs[run_id]) == kept  # no lease taken, no write
        assert [meta.run_id for meta in await store.list_runs()] == [run_id]  # no fork
