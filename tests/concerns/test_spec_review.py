"""The ``spec_review`` gate: planning → spec_generated → review_pending → executing.

Scenarios of source note 001 (U8 spec review gate and acceptance example AE4), driven
through the real interpreter on a memory store with human gates answered by
``Engine.reply`` and deadlines passed with a fake clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import FakeClock, engine, prepared, returning, task_machine
from concern_kit import events_of
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns.spec import check_spec
from phasegraph.errors import IllegalTriggerError, RunStateError
from phasegraph.model import (
    ActionDef,
    GraphDef,
    NodeDef,
    NodeOutcome,
    NodeStatus,
    RunStatus,
)
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore

SPEC_REVIEW = load_machine("spec_review")
HALF_HOUR = 1800


def review_graph(*, timeout: float | None = HALF_HOUR, plans: int | None = None) -> GraphDef:
    review = ActionDef(
        kind="human",
        config=MappingProxyType(
            {"human": "spec_review", "payload": {"spec": "{spec}"}, "timeout": timeout}
        ),
        triggers=("confirm", "reject", "timeout"),
    )
    parked = ActionDef(
        kind="human",
        config=MappingProxyType({"human": "spec_review", "park": True}),
        triggers=("confirm", "reject"),
    )
    settings_ = {"budgets": {"plans": plans}} if plans else {}
    spec = NodeDef(
        id="feature",
        machine="spec_review",
        bind=MappingProxyType({"spec_review": review, "spec_review_parked": parked}),
        settings=MappingProxyType(settings_),
    )
    execute = NodeDef(id="execute", machine="task", needs=("feature",))
    return GraphDef(
        name="spec",
        nodes=(spec, execute),
        machines=MappingProxyType({"spec_review": SPEC_REVIEW, "task": task_machine()}),
        digest="spec",
    )


def planner(seen: list[Mapping[str, Any]], *, empty_first: bool = False):
    async def plan(ctx: ActionContext) -> ActionResult:
        seen.append(dict(ctx.payload))
        text = "" if empty_first and len(seen) == 1 else f"spec v{len(seen)}"
        return ActionResult(trigger="generated", data={"spec": text})

    return plan


def build(seen: list[Mapping[str, Any]], **options: Any):
    definition = review_graph(**options)
    actions = {
        ("feature", "plan"): planner(seen),
        ("feature", "check_spec"): check_spec,
        ("execute", "run"): returning("ok", {"executed": True}),
    }
    return prepared(definition, actions)


def review_id(run_id: str) -> str:
    return f"{run_id}:feature:spec_review"


async def test_confirm_resumes_execution():
    """Note 001 AE4 / U8 happy path: the spec is generated → spec_review_request is
    emitted → execution suspends → the user confirms → spec_review_reply → execution
    resumes (the dependent node runs)."""
    seen: list[Mapping[str, Any]] = []
    definition = build(seen)
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        assert waiting.status is RunStatus.WAITING
        assert waiting.nodes["feature"].path == ("review_pending",)
        assert waiting.nodes["execute"].status is NodeStatus.PENDING
        interrupt = waiting.interrupts[review_id(waiting.run_id)]
        assert interrupt.kind == "spec_review"
        assert interrupt.payload == {"spec": "spec v1"}
        done = await eng.reply(waiting.run_id, interrupt.id, "confirm", graph=definition)
        history = await eng.history(waiting.run_id)
    assert done.status is RunStatus.COMPLETED
    assert done.nodes["feature"].path == ("executing",)
    assert done.data["executed"] is True
    requests = events_of(history, "spec_review_request")
    replies = events_of(history, "spec_review_reply")
    assert [e["id"] for e in requests] == [review_id(done.run_id)]
    assert [(e["id"], e["trigger"]) for e in replies] == [(review_id(done.run_id), "confirm")]
    path = [r.dest[-1] for r in history if r.node == "feature" and r.kind != "wait"]
    assert path == ["planning", "spec_generated", "review_pending", "executing"]


async def test_reject_replans_with_feedback_and_asks_again():
    """Note 001 U8 edge case: the user rejects → replan with the feedback → a new spec is
    generated → reviewed again (same stable id)."""
    seen: list[Mapping[str, Any]] = []
    definition = build(seen)
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        again = await eng.reply(
            waiting.run_id,
            review_id(waiting.run_id),
            "reject",
            payload={"feedback": "cover the error path"},
            graph=definition,
        )
        assert again.status is RunStatus.WAITING
        assert again.interrupts[review_id(again.run_id)].payload == {"spec": "spec v2"}
        done = await eng.reply(again.run_id, review_id(again.run_id), "confirm", graph=definition)
        history = await eng.history(again.run_id)
    assert seen == [{}, {"feedback": "cover the error path"}]
    assert done.status is RunStatus.COMPLETED
    assert len(events_of(history, "spec_review_request")) == 2
    assert [e["trigger"] for e in events_of(history, "spec_review_reply")] == ["reject", "confirm"]


async def test_timeout_parks_the_run_and_a_reply_resumes_it():
    """Note 001 U8 edge case: no answer within 30 minutes → parked (not failed); the
    review's timeout closes the request; a reply to the parked run resumes it."""
    seen: list[Mapping[str, Any]] = []
    definition = build(seen)
    clock = FakeClock()
    async with MemoryStore() as store:
        eng = engine(store)
        eng.clock = clock
        waiting = await eng.run(definition)
        interrupt = waiting.interrupts[review_id(waiting.run_id)]
        assert interrupt.deadline is not None
        assert interrupt.created_at is not None
        assert interrupt.deadline - interrupt.created_at == timedelta(seconds=HALF_HOUR)
        clock._now += timedelta(minutes=31)
        parked = await eng.resume(waiting.run_id, graph=definition)
        assert parked.status is RunStatus.PARKED
        assert parked.nodes["feature"].path == ("parked",)
        assert parked.nodes["feature"].status is NodeStatus.WAITING
        assert parked.nodes["feature"].outcome is None
        # The parked review keeps the id the reviewer was given (DESIGN §4).
        assert list(parked.interrupts) == [review_id(waiting.run_id)]
        assert parked.interrupts[review_id(waiting.run_id)].parked is True
        done = await eng.reply(
            waiting.run_id, review_id(waiting.run_id), "confirm", graph=definition
        )
        history = await eng.history(waiting.run_id)
    assert done.status is RunStatus.COMPLETED
    replies = events_of(history, "spec_review_reply")
    assert [(e["id"], e["trigger"]) for e in replies] == [
        (review_id(done.run_id), "timeout"),
        (review_id(done.run_id), "confirm"),
    ]
    requests = events_of(history, "spec_review_request")
    assert {e["id"] for e in requests} == {review_id(done.run_id)}


async def test_a_parked_run_can_be_rejected_into_a_new_plan():
    seen: list[Mapping[str, Any]] = []
    definition = build(seen, timeout=0)
    async with MemoryStore() as store:
        eng = engine(store)
        parked = await eng.run(definition)
        assert parked.status is RunStatus.PARKED
        parked_id = review_id(parked.run_id)
        again = await eng.reply(
            parked.run_id, parked_id, "reject", payload={"feedback": "smaller"}, graph=definition
        )
    assert seen[-1] == {"feedback": "smaller"}
    assert again.nodes["feature"].path == ("parked",)  # timeout 0: parked again at once


async def test_cancelled_during_review_closes_the_gate():
    """Note 001 U8 edge case: the stream is cancelled during the review → the run is
    cancelled, no interrupt stays pending (no deadlock), and a late reply is refused."""
    definition = build([])
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        cancelled = await eng.cancel(waiting.run_id, graph=definition)
        assert cancelled.status is RunStatus.CANCELLED
        assert cancelled.interrupts == {}
        assert cancelled.nodes["feature"].status is NodeStatus.CANCELLED
        with pytest.raises(RunStateError):
            await eng.reply(waiting.run_id, review_id(waiting.run_id), "confirm", graph=definition)


async def test_reply_with_an_unknown_id_or_trigger_is_refused_and_commits_nothing():
    """Note 001 U8 error paths: a reply with an invalid spec_review_id → a clear error; a
    reply that cannot resolve the gate (an illegal trigger) fails without breaking the run."""
    definition = build([])
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        with pytest.raises(RunStateError, match="no pending interrupt"):
            await eng.reply(waiting.run_id, f"{waiting.run_id}:plan:spec_review", "confirm",
                            graph=definition)  # fmt: skip
        with pytest.raises(IllegalTriggerError, match="legal triggers: confirm, reject, timeout"):
            await eng.reply(waiting.run_id, review_id(waiting.run_id), "approve", graph=definition)
        still = await eng.get(waiting.run_id)
        assert still == waiting
        done = await eng.reply(waiting.run_id, review_id(waiting.run_id), "confirm",
                               graph=definition)  # fmt: skip
    assert done.status is RunStatus.COMPLETED


async def test_an_empty_spec_goes_back_to_planning_with_a_reason():
    seen: list[Mapping[str, Any]] = []
    definition = review_graph()
    actions = {
        ("feature", "plan"): planner(seen, empty_first=True),
        ("feature", "check_spec"): check_spec,
        ("execute", "run"): returning("ok"),
    }
    async with MemoryStore() as store:
        waiting = await engine(store).run(prepared(definition, actions))
    assert waiting.status is RunStatus.WAITING
    assert "no spec was written" in seen[1]["feedback"]
    assert waiting.interrupts[review_id(waiting.run_id)].payload == {"spec": "spec v2"}


async def test_rejections_beyond_the_plans_budget_end_rejected():
    definition = build([], plans=2)
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(definition)
        for _ in range(2):
            state = await eng.reply(state.run_id, review_id(state.run_id), "reject",
                                    payload={"feedback": "no"}, graph=definition)  # fmt: skip
    assert state.nodes["feature"].path == ("rejected",)
    assert state.nodes["feature"].outcome is NodeOutcome.FAILED
    assert state.nodes["execute"].status is NodeStatus.SKIPPED
    assert state.status is RunStatus.FAILED


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answers=st.lists(st.sampled_from(["confirm", "reject", "timeout"]), max_size=12),
    plans=st.integers(1, 4),
)
def test_review_always_ends_within_the_plans_budget(answers, plans):
    """Hypothesis: whatever the reviewer answers, plans never exceed their budget and the
    gate is settled after at most 2 x plans answers (terminal-event symmetry: every request
    gets exactly one reply)."""

    async def scenario():
        seen: list[Mapping[str, Any]] = []
        definition = build(seen, plans=plans)
        async with MemoryStore() as store:
            eng = engine(store)
            state = await eng.run(definition)
            replies = 0
            for answer in answers:
                if not state.interrupts:
                    break
                (pending,) = state.interrupts.values()
                trigger = "reject" if answer == "timeout" and pending.parked else answer
                state = await eng.reply(state.run_id, pending.id, trigger, graph=definition)
                replies += 1
            history = await eng.history(state.run_id)
        return state, history, replies, seen

    state, history, replies, seen = asyncio.run(scenario())
    assert len(seen) == state.nodes["feature"].counters["plans"] <= plans
    assert replies <= 2 * plans
    requests = events_of(history, "spec_review_request")
    closed = events_of(history, "spec_review_reply")
    assert len(requests) - len(closed) == len(state.interrupts) <= 1
    if not state.interrupts:
        assert state.status in {RunStatus.COMPLETED, RunStatus.FAILED}
