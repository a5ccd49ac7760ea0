"""The lease of a run in flight is renewed for as long as the run goes on."""

from __future__ import annotations

import asyncio

import pytest

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import LeaseHeldError
from phasegraph.model import RunStatus
from phasegraph.store.memory import MemoryStore


async def test_the_lease_is_renewed_while_a_long_action_runs():
    """An action that outlives the lease ttl several times over still commits its step."""
    ttl = 0.3

    async def slow(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(4 * ttl)  # four ttls: the lease must be renewed repeatedly
        return ActionResult(trigger="ok")

    plan = prepared(graph([("a", [])]), {("a", "run"): slow})
    async with MemoryStore() as store:
        run = asyncio.create_task(engine(store, lease_ttl=ttl).run(plan, run_id="long"))
        await asyncio.sleep(2.5 * ttl)  # past the first expiry: still held by the run
        with pytest.raises(LeaseHeldError):
            await store.acquire("long", "intruder", ttl)
        state = await run
    assert state.status is RunStatus.COMPLETED
