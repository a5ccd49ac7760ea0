"""Gates that name their reviewers, replies that apply once, and who decided each step."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import engine, graph, prepared, returning, review_machine
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.errors import GateAnsweredError, NotAReviewerError, StaleReplyError
from phasegraph.model import ActionDef, Actor, NodeDef, RunStatus
from phasegraph.run import PreparedGraph
from phasegraph.store.memory import MemoryStore

REVIEWERS = ("alice", "group:release")
ALICE = Actor(name="alice")
BOB = Actor(name="bob", groups=("dev",))
CAROL = Actor(name="carol", groups=("dev", "release"))
# Named as the group is referred to, and in no group: names and groups are two namespaces.
SPOOF = Actor(name="group:release")


def reviewed(reviewers: tuple[str, ...] = REVIEWERS) -> PreparedGraph:
    """plan → review (a gate naming ``reviewers``) → build; reject goes back to plan."""
    gate = ActionDef(
        kind="human",
        config={"human": "review", "payload": {"spec": "{spec}"}, "reviewers": list(reviewers)},
        triggers=("confirm", "reject"),
    )
    node = NodeDef(id="feature", machine="review", bind=MappingProxyType({"review": gate}))
    plans = iter(range(1, 1000))

    async def plan(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok", data={"spec": f"v{next(plans)}"})

    definition = graph([node], machines=[review_machine()])
    return prepared(definition, {("feature", "plan"): plan, ("feature", "build"): returning("ok")})


def gate_of(run_id: str) -> str:
    return f"{run_id}:feature:review"


async def test_a_gate_lists_its_reviewers_and_the_step_that_opened_it() -> None:
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(reviewed())
        interrupt = waiting.interrupts[gate_of(waiting.run_id)]
        assert interrupt.reviewers == REVIEWERS
        assert interrupt.seq == waiting.seq  # the wait step was the last one
        opened = (await eng.history(waiting.run_id))[-1]
        assert opened.kind == "wait"
        assert opened.events[0]["reviewers"] == list(REVIEWERS)


async def test_a_non_reviewer_is_refused_naming_the_gate_then_a_reviewer_answers() -> None:
    definition = reviewed()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        gate = gate_of(waiting.run_id)
        with pytest.raises(NotAReviewerError) as refused:
            await eng.reply(waiting.run_id, gate, "confirm", actor=BOB, graph=definition)
        assert gate in str(refused.value)
        assert "alice, group:release" in str(refused.value)
        assert refused.value.context()["reviewers"] == list(REVIEWERS)
        assert refused.value.actor == "bob"
        assert (await eng.get(waiting.run_id)).seq == waiting.seq  # nothing committed
        # A member of a listed group answers.
        done = await eng.reply(waiting.run_id, gate, "confirm", actor=CAROL, graph=definition)
        assert done.status is RunStatus.COMPLETED
        assert (await eng.replay(waiting.run_id, definition)).identical
        answer = (await eng.history(waiting.run_id, start=waiting.seq + 1))[0]
        assert answer.kind == "reply"
        assert answer.actor == CAROL


async def test_an_actor_named_like_a_group_reference_is_not_its_member() -> None:
    definition = reviewed()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        gate = gate_of(waiting.run_id)
        with pytest.raises(NotAReviewerError) as refused:
            await eng.reply(waiting.run_id, gate, "confirm", actor=SPOOF, graph=definition)
        assert refused.value.actor == "group:release"
        assert (await eng.get(waiting.run_id)).seq == waiting.seq  # nothing committed


async def test_a_reply_naming_no_actor_is_a_trusted_local_one() -> None:
    definition = reviewed(("alice",))
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        done = await eng.reply(waiting.run_id, gate_of(waiting.run_id), "confirm", graph=definition)
        assert done.status is RunStatus.COMPLETED
        answer = (await eng.history(waiting.run_id, start=waiting.seq + 1))[0]
        assert answer.actor is None


async def test_a_replayed_reply_is_refused_and_names_who_answered() -> None:
    definition = reviewed()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        gate = gate_of(waiting.run_id)
        step = waiting.interrupts[gate].seq
        # reject: the node plans again and the same gate opens again, at a later step
        again = await eng.reply(
            waiting.run_id, gate, "reject", actor=ALICE, step=step, graph=definition
        )
        assert again.interrupts[gate].seq > step
        with pytest.raises(GateAnsweredError, match="answered already") as replayed:
            await eng.reply(
                waiting.run_id, gate, "reject", actor=ALICE, step=step, graph=definition
            )
        assert replayed.value.answered_by == "alice"
        assert replayed.value.answered_at == step + 1
        assert "'alice'" in str(replayed.value)
        assert (await eng.get(waiting.run_id)).seq == again.seq


async def test_a_stale_reply_is_refused_with_the_step_the_gate_waits_at() -> None:
    definition = reviewed()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition)
        gate = gate_of(waiting.run_id)
        current = waiting.interrupts[gate].seq
        with pytest.raises(StaleReplyError, match=f"opened at step {current}") as stale:
            await eng.reply(
                waiting.run_id, gate, "confirm", actor=ALICE, step=current - 1, graph=definition
            )
        assert stale.value.current == current
        assert stale.value.step == current - 1
        # The right step is taken.
        done = await eng.reply(
            waiting.run_id, gate, "confirm", actor=ALICE, step=current, graph=definition
        )
        assert done.status is RunStatus.COMPLETED
        # Once the run completed, the same reply is one already applied.
        with pytest.raises(GateAnsweredError):
            await eng.reply(
                waiting.run_id, gate, "confirm", actor=ALICE, step=current, graph=definition
            )


async def test_starting_cancelling_and_forking_record_the_actor() -> None:
    definition = reviewed()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(definition, actor=ALICE)
        fork = await eng.fork(waiting.run_id, actor=CAROL)
        await eng.cancel(waiting.run_id, "not needed", graph=definition, actor=BOB)
        history = await eng.history(waiting.run_id)
        assert history[0].kind == "created"
        assert history[0].actor == ALICE
        assert history[-1].kind == "cancel"
        assert history[-1].actor == BOB
        assert [r.actor for r in history[1:-1]] == [None] * (len(history) - 2)
        forked = await eng.history(fork)
        assert forked[0].actor == CAROL
        # Who decided is an outside input a replay feeds as recorded.
        assert (await eng.replay(waiting.run_id, definition)).identical
        # The fork's gate was opened by its own first step.
        assert (await eng.get(fork)).interrupts[gate_of(fork)].seq == 0


ACTORS = st.sampled_from([ALICE, BOB, CAROL, SPOOF, None])
STEPS = st.sampled_from(["current", "old", "none"])


@given(st.lists(st.tuples(ACTORS, STEPS, st.sampled_from(["reject", "confirm"])), max_size=8))
def test_only_a_reviewers_first_reply_to_an_opening_applies(
    replies: list[tuple[Actor | None, str, str]],
) -> None:
    """Any replies by any actors: each applies iff the gate is open at the step it quotes
    and the actor may answer; the journal records exactly the applied ones' actors."""

    async def scenario() -> None:
        definition = reviewed()
        async with MemoryStore() as store:
            eng = engine(store)
            state = await eng.run(definition)
            gate = gate_of(state.run_id)
            old: int | None = None
            applied: list[Actor | None] = []
            for actor, which, trigger in replies:
                pending = state.interrupts.get(gate)
                opened = None if pending is None else pending.seq
                step = {"current": opened, "old": old, "none": None}[which]
                admitted = actor is None or actor.name == "alice" or "release" in actor.groups
                expected = pending is not None and admitted and step in (None, opened)
                refused: Exception | None = None
                try:
                    state = await eng.reply(
                        state.run_id, gate, trigger, actor=actor, step=step, graph=definition
                    )
                except (NotAReviewerError, GateAnsweredError, StaleReplyError) as exc:
                    refused = exc
                if refused is not None:
                    assert not expected
                    # A closed gate (the run completed) was answered: never a reviewer refusal.
                    assert pending is not None or isinstance(refused, GateAnsweredError)
                    continue
                assert expected
                applied.append(actor)
                old = opened
            history = await eng.history(state.run_id)
            assert [r.actor for r in history if r.kind == "reply"] == applied

    asyncio.run(scenario())
