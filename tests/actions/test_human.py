"""Human gates: waiting runs, replies, deadlines honoured on resume, parking, cancellation."""

from __future__ import annotations

from datetime import timedelta
from types import MappingProxyType

import pytest

from builders import FakeClock, engine, graph, prepared, returning, review_machine
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import GateAnsweredError, IllegalTriggerError, RunStateError
from phasegraph.model import (
    ActionDef,
    NodeDef,
    NodeStatus,
    RunStatus,
    replace,
)
from phasegraph.store.memory import MemoryStore


def human(kind: str, **config) -> ActionDef:
    return ActionDef(
        kind="human", config={"human": kind, **config}, triggers=("confirm", "reject", "timeout")
    )


def review_graph(timeout: float | None = 60):
    node = NodeDef(
        id="feature",
        machine="review",
        bind=MappingProxyType(
            {
                "review": human("spec_review", payload={"spec": "{spec}"}, timeout=timeout),
                "parked": human("spec_review", park=True),
            }
        ),
    )
    return graph([node, ("after", ["feature"])], machines=[review_machine()])


def planner(seen: list):
    async def plan(ctx: ActionContext) -> ActionResult:
        seen.append(dict(ctx.payload))
        return ActionResult(trigger="ok", data={"spec": f"spec v{len(seen)}"})

    return plan


def actions(seen: list):
    return {
        ("feature", "plan"): planner(seen),
        ("feature", "build"): returning("ok", {"built": True}),
        ("after", "run"): returning("ok"),
    }


async def test_gate_waits_then_confirm_completes_the_run():
    seen: list = []
    definition = prepared(review_graph(), actions(seen))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        assert waiting.status is RunStatus.WAITING
        assert waiting.nodes["feature"].status is NodeStatus.WAITING
        interrupt_id = f"{waiting.run_id}:feature:review"
        interrupt = waiting.interrupts[interrupt_id]
        assert interrupt.kind == "spec_review"
        assert interrupt.payload == {"spec": "spec v1"}
        assert interrupt.deadline is not None
        history = await eng.history(waiting.run_id)
        assert any(e.get("kind") == "spec_review_request" for r in history for e in r.events)

        assert await eng.get(waiting.run_id) == waiting  # the store holds exactly this
        done = await eng.reply(waiting.run_id, interrupt_id, "confirm", graph=definition)
        assert await eng.get(waiting.run_id) == done
    assert done.status is RunStatus.COMPLETED
    assert done.interrupts == {}
    assert done.data["built"] is True


async def test_reject_replans_with_feedback_visible_to_planner():
    seen: list = []
    definition = prepared(review_graph(), actions(seen))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        interrupt_id = f"{waiting.run_id}:feature:review"
        again = await eng.reply(
            waiting.run_id,
            interrupt_id,
            "reject",
            payload={"feedback": "add tests"},
            graph=definition,
        )
        assert again.status is RunStatus.WAITING
        assert await eng.get(waiting.run_id) == again
        assert seen == [{}, {"feedback": "add tests"}]
        assert again.interrupts[interrupt_id].payload == {"spec": "spec v2"}


async def test_reply_refusals_commit_nothing():
    seen: list = []
    definition = prepared(review_graph(), actions(seen))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        with pytest.raises(RunStateError, match="no pending interrupt 'bogus'"):
            await eng.reply(waiting.run_id, "bogus", "confirm", graph=definition)
        with pytest.raises(IllegalTriggerError, match="legal triggers"):
            await eng.reply(
                waiting.run_id, f"{waiting.run_id}:feature:review", "ok", graph=definition
            )
        assert (await eng.get(waiting.run_id)).seq == waiting.seq
        done = await eng.reply(
            waiting.run_id, f"{waiting.run_id}:feature:review", "confirm", graph=definition
        )
        # The run completed: a second confirm is named for what it is, a replayed reply.
        with pytest.raises(GateAnsweredError, match="answered already, at step"):
            await eng.reply(
                done.run_id, f"{done.run_id}:feature:review", "confirm", graph=definition
            )


async def test_deadline_passed_while_no_process_ran_parks_on_resume_and_reply_resumes():
    seen: list = []
    definition = prepared(review_graph(timeout=30), actions(seen))
    clock = FakeClock()
    async with MemoryStore() as store:
        eng = engine(store)
        eng.clock = clock
        waiting = await eng.run(definition)
        assert waiting.status is RunStatus.WAITING
        clock._now += timedelta(minutes=31)  # the process is gone while the deadline passes
        parked = await eng.resume(waiting.run_id, graph=definition)
        assert parked.status is RunStatus.PARKED
        assert parked.nodes["feature"].path == ("parked",)
        parked_id = f"{waiting.run_id}:feature:review"  # the same question keeps its id
        assert parked.interrupts[parked_id].parked is True
        assert parked.nodes["feature"].status is NodeStatus.WAITING
        assert await eng.get(waiting.run_id) == parked
        done = await eng.reply(waiting.run_id, parked_id, "confirm", graph=definition)
    assert done.status is RunStatus.COMPLETED


async def test_deadline_not_passed_keeps_run_waiting_on_resume():
    definition = prepared(review_graph(timeout=30), actions([]))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        again = await eng.resume(waiting.run_id, graph=definition)
    assert again.status is RunStatus.WAITING
    assert again.seq == waiting.seq


async def test_cancel_waiting_run_cancels_unfinished_nodes():
    definition = prepared(review_graph(), actions([]))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        cancelled = await eng.cancel(waiting.run_id, graph=definition)
        assert cancelled.status is RunStatus.CANCELLED
        assert cancelled.interrupts == {}
        assert {n.status for n in cancelled.nodes.values()} == {NodeStatus.CANCELLED}
        with pytest.raises(RunStateError, match="already cancelled"):
            await eng.cancel(waiting.run_id, graph=definition)


async def test_a_deadline_the_machine_cannot_take_fails_the_node_and_closes_the_gate():
    base = review_machine()
    no_timeout = replace(
        base, transitions=tuple(t for t in base.transitions if t.trigger != "timeout")
    )
    gated = review_graph(timeout=30)
    machines = MappingProxyType({**gated.machines, "review": no_timeout})
    definition = prepared(replace(gated, machines=machines), actions([]))
    clock = FakeClock()
    async with MemoryStore() as store:
        eng = engine(store)
        eng.clock = clock
        waiting = await eng.run(definition)
        assert waiting.status is RunStatus.WAITING
        clock._now += timedelta(minutes=31)
        failed = await eng.resume(waiting.run_id, graph=definition)
    assert failed.status is RunStatus.FAILED
    assert failed.nodes["feature"].status is NodeStatus.FAILED
    assert failed.nodes["after"].status is NodeStatus.SKIPPED
    assert dict(failed.interrupts) == {}
