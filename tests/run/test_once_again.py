"""A ``once`` effect stays once across crashes and truthful answers, however many.

Before a ``once`` effect runs again (a ``run_again`` answer, a ``retry`` policy, a
reconciler that found nothing) its intent is committed again, under the binding's own
policy: a second crash after the re-run asks again rather than running it a third time.

The property kills the run at a drawn commit of each attempt (before or after it is
written), for a few attempts in a row, answers every ``outcome_unknown`` gate truthfully
(``happened`` when the effect ran, else ``run_again``) and checks that no ``once`` effect,
an action's own or a tool call's, ran twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult, declare_effect
from phasegraph.actions.llm._tools import build_tools_action
from phasegraph.codec import decode_record
from phasegraph.errors import RunNotFoundError
from phasegraph.model import ActionDef, Effect, NodeDef, RunState, RunStatus
from phasegraph.run import PreparedGraph
from phasegraph.store import Commit, ForwardingStore, Lease
from phasegraph.store.memory import MemoryStore
from phasegraph.tools._builtins import Scope
from phasegraph.tools._registry import build_tools


class _Killed(BaseException):
    """The process died here: nothing in the engine catches it."""


class _KillAt(ForwardingStore):
    """Kills the process at its ``at``-th commit (of ``kind``, if given), before or after it."""

    def __init__(self, inner: MemoryStore, at: int, after: bool, kind: str = "") -> None:
        super().__init__(inner)
        self.at, self.after, self.kind, self.seen = at, after, kind, 0
        self.kinds: list[str] = []

    async def commit(self, lease: Lease, commit: Commit) -> None:
        kind = decode_record(commit.record).kind
        self.kinds.append(kind)
        self.seen += not self.kind or kind == self.kind
        if self.seen == self.at and not self.after:
            raise _Killed
        await super().commit(lease, commit)
        if self.seen == self.at:
            raise _Killed


def _paying(ran: Counter[str], calls: int) -> PreparedGraph:
    """``pay``: a ``once`` action; ``act``: ``calls`` ``once`` tool calls that ``plan`` asks for."""

    @declare_effect(Effect.ONCE)
    async def pay(ctx: ActionContext) -> ActionResult:
        ran[ctx.effect_id] += 1
        return ActionResult(trigger="ok")

    @declare_effect(Effect.ONCE)
    async def send(scope: Scope, *, x: int) -> Mapping[str, Any]:
        ran[scope.effect_id] += 1
        return {"x": x}

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "send", "arguments": "{}"}}
            for i in range(calls)
        ],
    }
    for i, call in enumerate(message["tool_calls"]):
        call["function"]["arguments"] = json.dumps({"x": i})

    async def plan(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok", data={"conversation": [message]})

    act = build_tools_action(
        ActionDef(kind="tools", config={"tools": "conversation", "on_outcome": {"observed": "ok"}}),
        None,
    )
    definition = graph(
        [
            NodeDef(id="pay", machine="task"),
            NodeDef(id="plan", machine="task", needs=("pay",)),
            NodeDef(id="act", machine="task", needs=("plan",)),
        ]
    )
    built = prepared(definition, {("pay", "run"): pay, ("plan", "run"): plan, ("act", "run"): act})
    return dataclasses.replace(built, tools=build_tools(definition, {"send": send}))


def _truthful(store: Any, plan: PreparedGraph, ran: Counter[str]) -> Callable[..., Awaitable[Any]]:
    async def answer(state: RunState) -> RunState:
        [gate] = state.interrupts.values()
        effect_id = str(gate.payload["effect_id"])
        if not ran[effect_id]:
            return await engine(store).reply(state.run_id, gate.id, "run_again", graph=plan)
        payload = {"result": {"x": gate.payload["index"]}} if gate.payload["tool"] else {}
        payload = payload or {"trigger": "ok"}
        return await engine(store).reply(
            state.run_id, gate.id, "happened", payload=payload, graph=plan
        )

    return answer


Kill = tuple[str, int, bool]
"""Kill at the ``at``-th commit of a kind ("": of any kind), after it is written or before."""


async def _until_done(plan: PreparedGraph, ran: Counter[str], kills: list[Kill]) -> RunState:
    """Run, then resume (answering truthfully) after each kill, each attempt killed at its point."""
    inner = MemoryStore()
    for attempt in range(len(kills) + 1):
        store: Any = inner
        if attempt < len(kills):
            kind, at, after = kills[attempt]
            store = _KillAt(inner, at, after, kind)
        answer = _truthful(store, plan, ran)
        try:
            try:
                state = await engine(inner).get("r")
            except RunNotFoundError:  # killed before the run was created
                state = await engine(store).run(plan, run_id="r")
            if not state.status.terminal:
                state = await engine(store).resume("r", graph=plan)
            while state.status is RunStatus.WAITING:
                state = await answer(state)
        except _Killed:
            continue
        return state
    raise AssertionError("the last attempt is never killed")


_KILLS = st.one_of(
    st.tuples(st.just(""), st.integers(1, 12), st.booleans()),
    st.tuples(
        st.sampled_from(["intent", "effect", "transition"]), st.integers(1, 3), st.booleans()
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.integers(1, 2), kills=st.lists(_KILLS, min_size=1, max_size=4))
# The reproductions: after the intent, run_again, then after the effect.
@example(calls=1, kills=[("intent", 1, True), ("transition", 1, False)])
@example(calls=2, kills=[("intent", 2, True), ("effect", 1, False)])
def test_no_once_effect_runs_twice_whatever_the_crashes_and_truthful_answers(
    calls: int, kills: list[Kill]
) -> None:
    ran: Counter[str] = Counter()
    state = asyncio.run(_until_done(_paying(ran, calls), ran, kills))

    assert state.status is RunStatus.COMPLETED
    assert ran == Counter({"r:pay:0": 1, **{f"r:act:0:{i}": 1 for i in range(calls)}})


def test_a_crash_after_a_run_again_asks_again_instead_of_paying_twice() -> None:
    """The reproduction: killed after the intent, run_again, killed after the effect."""

    async def scenario() -> tuple[Counter[str], list[str], RunState]:
        ran: Counter[str] = Counter()
        plan = _paying(ran, 1)
        inner = MemoryStore()
        with contextlib.suppress(_Killed):
            await engine(_KillAt(inner, 1, after=True, kind="intent")).run(plan, run_id="r")
        state = await engine(inner).resume("r", graph=plan)
        [gate] = state.interrupts.values()
        # run_again: the action commits its intent again, pays, and dies before its result
        killing = _KillAt(inner, 1, after=False, kind="transition")
        with contextlib.suppress(_Killed):
            await engine(killing).reply("r", gate.id, "run_again", graph=plan)
        state = await engine(inner).resume("r", graph=plan)
        return ran, killing.kinds, state

    ran, kinds, state = asyncio.run(scenario())
    assert kinds == ["reply", "intent", "transition"]
    assert ran == Counter({"r:pay:0": 1})
    assert state.status is RunStatus.WAITING  # asked again, not paid again
    [gate] = state.interrupts.values()
    assert (gate.kind, gate.payload["effect_id"]) == ("outcome_unknown", "r:pay:0")
