"""Property: a crash at any ledger commit of a multi-call step, then resume.

An ``act`` step runs calls of three tools, one of each effect kind, in a drawn order; each
tool counts its executions by effect id. The run is killed (a ``BaseException`` out of
the store's commit, so nothing catches it) just before or just after a drawn ledger
commit, then resumed by a fresh engine on the same store. Under each policy:

* a call whose result was committed never runs again;
* a ``once`` call runs exactly once under ``ask`` (answered truthfully: ``happened``
  when it ran, else ``run_again``), at most twice under ``retry``, and under ``fail``
  the node fails exactly when its outcome is unknown;
* ``none`` and ``idempotent`` calls run at most twice (once more only when the crash
  fell between the call and its commit), and never ask;
* the conversation the step commits is the uninterrupted run's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult, declare_effect
from phasegraph.actions.llm._tools import build_tools_action
from phasegraph.codec import decode_record
from phasegraph.model import ActionDef, Effect, NodeDef, RunState, RunStatus
from phasegraph.run import PreparedGraph
from phasegraph.store import Commit, ForwardingStore, Lease
from phasegraph.store.base import Store
from phasegraph.store.memory import MemoryStore
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import isolated_redis_store
from phasegraph.tools._builtins import Scope
from phasegraph.tools._registry import build_tools

KINDS = {"peek": Effect.NONE, "put": Effect.IDEMPOTENT, "send": Effect.ONCE}


class _Killed(BaseException):
    """The process died here: nothing in the engine catches it."""


class KillingStore(ForwardingStore):
    """Kills the run at its ``at``-th ledger commit (before or after it is written)."""

    def __init__(self, inner: MemoryStore, at: int | None, after: bool) -> None:
        super().__init__(inner)
        self.at, self.after, self.seen = at, after, 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        hit = False
        if self.at is not None and decode_record(commit.record).ledger is not None:
            self.seen += 1
            hit = self.seen == self.at
        if hit and not self.after:
            raise _Killed
        await super().commit(lease, commit)
        if hit:
            raise _Killed


def _message(names: list[str]) -> dict[str, Any]:
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": n, "arguments": json.dumps({"x": i})},
        }
        for i, n in enumerate(names)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _prepared(
    names: list[str],
    policy: str,
    ran: Counter[str],
    *,
    acts: tuple[str, ...] = ("act",),
    yields: int = 0,
) -> PreparedGraph:
    """``plan`` writes the model's message; each of ``acts`` runs its calls (in parallel)."""

    def key(act: str) -> str:
        return "conversation" if acts == ("act",) else f"conversation_{act}"

    def tool(kind: Effect) -> Any:
        @declare_effect(kind)
        async def counted(scope: Scope, *, x: int) -> Mapping[str, Any]:
            for _ in range(yields):  # let the other step's calls in between
                await asyncio.sleep(0)
            ran[scope.effect_id] += 1
            return {"x": x, "id": scope.effect_id}

        return counted

    async def plan(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok", data={key(a): [_message(names)] for a in acts})

    def act(name: str) -> Any:
        config = {"tools": key(name), "on_outcome": {"observed": "ok"}, "on_unknown": policy}
        return build_tools_action(ActionDef(kind="tools", config=config), None)

    nodes = [
        NodeDef(id="plan", machine="task"),
        *(NodeDef(id=a, machine="task", needs=("plan",)) for a in acts),
    ]
    definition = graph(nodes)
    bound = {("plan", "run"): plan, **{(a, "run"): act(a) for a in acts}}
    built = prepared(definition, bound)
    tools = build_tools(definition, {name: tool(kind) for name, kind in KINDS.items()})
    return dataclasses.replace(built, tools=tools)


async def _answer_truthfully(
    store: MemoryStore, plan: PreparedGraph, state: RunState, ran: Counter[str]
) -> RunState:
    [gate] = state.interrupts.values()
    effect_id = str(gate.payload["effect_id"])
    if ran[effect_id]:
        return await engine(store).reply(
            state.run_id,
            gate.id,
            "happened",
            payload={"result": {"x": gate.payload["index"], "id": effect_id}},
            graph=plan,
        )
    return await engine(store).reply(state.run_id, gate.id, "run_again", graph=plan)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=5),
    policy=st.sampled_from(["ask", "retry", "fail"]),
    at=st.integers(1, 10),
    after=st.booleans(),
)
def test_a_crash_at_any_ledger_commit_keeps_each_effect_kinds_promise(
    names: list[str], policy: str, at: int, after: bool
) -> None:
    async def scenario() -> tuple[RunState, RunState, Counter[str], Counter[str], int]:
        whole_ran: Counter[str] = Counter()
        whole = await engine(MemoryStore()).run(_prepared(names, policy, whole_ran), run_id="r")
        ran: Counter[str] = Counter()
        plan = _prepared(names, policy, ran)
        inner = MemoryStore()
        killing = KillingStore(inner, at, after)
        try:
            state = await engine(killing).run(plan, run_id="r")
        except _Killed:
            state = await engine(inner).resume("r", graph=plan)
        asks = 0
        while state.status is RunStatus.WAITING:
            asks += 1
            state = await _answer_truthfully(inner, plan, state, ran)
        return whole, state, whole_ran, ran, asks

    whole, state, whole_ran, ran, asks = asyncio.run(scenario())
    assert whole.status is RunStatus.COMPLETED
    assert set(whole_ran.values()) == {1}
    ids = [f"r:act:0:{i}" for i in range(len(names))]
    once = [i for i, name in enumerate(names) if KINDS[name] is Effect.ONCE]
    assert all(ran[effect_id] <= 2 for effect_id in ids)
    assert sum(ran[effect_id] - 1 for effect_id in ids if ran[effect_id]) <= 1  # one call cut
    assert asks <= 1
    if policy == "ask":
        assert all(ran[ids[i]] == 1 for i in once)
    if state.status is RunStatus.FAILED:  # only fail gives up, and only on an uncertain call
        # (as its action would have: the task machine has no error trigger, so it fails)
        assert policy == "fail"
        assert "is unknown" in (state.nodes["act"].error or "")
        return
    assert state.status is RunStatus.COMPLETED
    assert all(ran[effect_id] >= 1 for effect_id in ids)
    assert state.data["conversation"] == whole.data["conversation"]


def test_a_fork_from_inside_a_step_runs_only_the_calls_left() -> None:
    async def scenario() -> tuple[Counter[str], RunState, str]:
        ran: Counter[str] = Counter()
        plan = _prepared(["send", "send", "send"], "ask", ran)
        store = MemoryStore()
        runs = engine(store)
        await runs.run(plan, run_id="r")
        history = await runs.history("r")
        [at] = [r.seq for r in history if r.kind == "effect" and r.ledger and r.ledger.index == 1]
        fork = await runs.fork("r", at)
        return ran, await runs.resume(fork, graph=plan), fork

    ran, state, fork = asyncio.run(scenario())
    assert state.status is RunStatus.COMPLETED
    assert ran == Counter({"r:act:0:0": 1, "r:act:0:1": 1, "r:act:0:2": 1, f"{fork}:act:0:2": 1})
    messages = [m for m in state.data["conversation"] if m["role"] == "tool"]
    assert [json.loads(m["content"])["x"] for m in messages] == [0, 1, 2]


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_parallel_steps_commit_their_calls_between_each_others_steps(
    kind: str, tmp_path: Path, redis_url: str
) -> None:
    """Two act nodes at once, their tools yielding: whatever the order their ledger steps
    commit in (scheduling decides it), none is lost and every seq follows the one before.

    On Redis a commit waits on the network: a step built while another commit is in
    flight would have the wrong seq (the commit lock is what prevents it).
    """
    ran: Counter[str] = Counter()
    plan = _prepared(["send", "put", "send"], "ask", ran, acts=("a1", "a2"), yields=3)

    @asynccontextmanager
    async def opened() -> AsyncIterator[Store]:
        if kind == "redis":
            async with isolated_redis_store(redis_url) as store:
                yield store
        else:
            async with SqliteStore(tmp_path / "runs.db") as store:
                yield store

    async def scenario() -> tuple[RunState, list[Any]]:
        async with opened() as store:
            state = await engine(store).run(plan, run_id="r")
            return state, await engine(store).history("r")

    state, history = asyncio.run(scenario())
    assert state.status is RunStatus.COMPLETED
    assert [r.seq for r in history] == list(range(len(history)))
    assert ran == Counter({f"r:{a}:0:{i}": 1 for a in ("a1", "a2") for i in range(3)})
    ledger = [(r.node, r.kind) for r in history if r.ledger is not None]
    assert sorted(ledger).count(("a1", "effect")) == 3
    assert sorted(ledger).count(("a2", "intent")) == 2
    for act in ("a1", "a2"):
        results = [json.loads(m["content"]) for m in state.data[f"conversation_{act}"][1:]]
        assert [r["id"] for r in results] == [f"r:{act}:0:{i}" for i in range(3)]
