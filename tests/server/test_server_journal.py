"""A run whose journal does not end at its head, over HTTP: every route about it refuses it.

The run is in a memory store, damaged behind its back (the head's record dropped, or the
head seq rolled back). Each read and control route answers one problem naming the run and
the head seq, and no action of it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from builders import TESTS
from phasegraph import Engine
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import JournalDamage
from server.test_server import serving, settings_for
from store.journal_damage import MemoryDamage

GRAPH = TESTS / "fixtures" / "crash" / "crash.yaml"
HEAD = 4
ROUTES = [
    ("GET", ""),
    ("GET", "/snapshot"),
    ("GET", "/snapshot?seq=1"),
    ("GET", "/history"),
    ("GET", "/errors"),
    ("GET", "/graph"),
    ("GET", "/events"),
    ("POST", "/resume"),
    ("POST", "/replay"),
    ("POST", "/fork"),
    ("POST", "/cancel"),
]

# (damage, the head the metadata names after it, the last record stored after it)
DAMAGE: list[tuple[Callable[[JournalDamage, str], Awaitable[None]], int, int]] = [
    (lambda damage, run_id: damage.drop_last_record(run_id), HEAD, HEAD - 1),
    (lambda damage, run_id: damage.set_head(run_id, HEAD - 1), HEAD - 1, HEAD),
]


@pytest.mark.parametrize(
    ("damage", "head", "last"), DAMAGE, ids=["last-record-deleted", "head-rolled-back"]
)
async def test_every_route_refuses_the_run(
    tmp_path: Path, damage: Callable[[JournalDamage, str], Awaitable[None]], head: int, last: int
) -> None:
    log = tmp_path / "log"
    async with MemoryStore() as store:
        async with Engine(store).start(GRAPH, {"log": str(log), "loops": 3}) as run:
            for _ in range(HEAD):
                await run.next()
            run_id = run.run_id
        await damage(MemoryDamage(store), run_id)
        kept, marks = dataclasses.astuple(store._runs[run_id]), log.read_text()
        async with serving(Engine(store), settings_for(tmp_path)) as client:
            for method, path in ROUTES:
                response = await client.request(method, f"/runs/{run_id}{path}")
                problem = await response.json()
                assert (response.status, problem["code"]) == (500, "journal_head_mismatch"), path
                assert (problem["run_id"], problem["seq"]) == (run_id, head), path
                assert problem["last_stored_seq"] == last
                assert problem["detail"].startswith(f"run {run_id!r}: its head is seq {head} but")
        assert log.read_text() == marks  # no action ran
        assert dataclasses.astuple(store._runs[run_id]) == kept  # nothing written
        assert [meta.run_id for meta in await store.list_runs()] == [run_id]  # no fork
