"""Plans made at run time: a node's plan becomes its children, committed as one step.

The graphs here are YAML, as a user writes them; the actions are bound in code (a plan's
template by its label ``OWNER.*``), so each test says what the planner and the children
do. Crash-and-resume is a hypothesis property over plan shapes.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine
from phasegraph import codec
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import NodeStatus, RunState, RunStatus, StepRecord
from phasegraph.run import PreparedGraph, prepare
from phasegraph.spec import load_graph_text
from phasegraph.store.base import Store
from phasegraph.store.memory import MemoryStore
from phasegraph.store.sqlite import SqliteStore

Act = Callable[[ActionContext], Awaitable[ActionResult]]

GRAPH = """
graph: planned
reducers: {log: append}
nodes:
  - id: phases
    machine: plan
    writes: [plan]
    with: {replan: true, budgets: {plans: 3}}
    bind:
      plan: {python: "tests:never", triggers: [planned]}
      children:
        plan:
          from: plan
          id: id
          needs: needs
          called: phase
          max_items: 8
          concurrency: 2
          settings:
            type: object
            additionalProperties: false
            properties: {fails: {type: boolean}, word: {type: string}}
          result: out
          into: outs
          template:
            machine: task
            writes: [log]
            bind: {run: {python: "tests:never", triggers: [ok, fail]}}
  - id: after
    machine: task
    needs: [phases]
    writes: [seen]
    bind: {run: {python: "tests:never", triggers: [ok]}}
"""


def planner(*plans: Any) -> Act:
    """The planner: the n-th plan it is asked for (the last one again after that)."""

    async def plan(ctx: ActionContext) -> ActionResult:
        asked = ctx.counters.get("plans", 1)
        return ActionResult(trigger="planned", data={"plan": plans[min(asked, len(plans)) - 1]})

    return plan


async def child(ctx: ActionContext) -> ActionResult:
    """A child: fails if its item says so, else logs itself and hands back its word."""
    item = ctx.item
    if item.get("fails"):
        return ActionResult(trigger="fail", payload={"reason": "told to"})
    word = str(item.get("word", item["id"]))
    return ActionResult(trigger="ok", data={"log": [item["id"]], "out": word * 2})


async def after(ctx: ActionContext) -> ActionResult:
    return ActionResult(trigger="ok", data={"seen": ctx.data.get("outs")})


def prepared_plan(plan: Act, work: Act = child, text: str = GRAPH) -> PreparedGraph:
    definition = load_graph_text(text, name="planned.yaml")
    actions = {("phases", "plan"): plan, ("phases.*", "run"): work, ("after", "run"): after}
    return prepare(definition, "planned.yaml", actions)


async def history(store: Store, run_id: str) -> list[StepRecord]:
    return await engine(store).history(run_id)


def running_children(records: Sequence[StepRecord]) -> list[int]:
    """How many children run after each committed step."""
    running: set[str] = set()
    counts = []
    for record in records:
        for node_id, node in record.nodes.items():
            if "." in node_id and node.status is NodeStatus.RUNNING:
                running.add(node_id)
            elif "." in node_id:
                running.discard(node_id)
        counts.append(len(running))
    return counts


SIX = [
    {"id": "a"},
    {"id": "b", "needs": ["a"]},
    {"id": "c", "needs": ["a"]},
    {"id": "d", "needs": ["a"]},
    {"id": "e", "needs": ["b", "c"]},
    {"id": "f", "needs": ["d"]},
]


async def test_the_plan_is_committed_in_one_step_before_any_child_runs() -> None:
    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(planner(SIX)), {})
        records = await history(store, state.run_id)
    assert state.status is RunStatus.COMPLETED
    [expand] = [r for r in records if r.kind == "expand"]
    assert expand.plan is not None
    assert expand.plan.members == tuple("abcdef")
    made = {k: v.status for k, v in expand.nodes.items() if k.startswith("phases.")}
    assert made == {f"phases.{i}": NodeStatus.PENDING for i in "abcdef"}
    assert expand.nodes["phases"].status is NodeStatus.WAITING
    first_child = min(r.seq for r in records if r.kind == "start" and "." in (r.node or ""))
    assert first_child > expand.seq
    # The committed record carries the plan: bytes and back.
    assert codec.decode_record(codec.encode_record(expand)) == expand


async def test_children_run_in_layers_never_more_than_the_limit() -> None:
    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(planner(SIX)), {})
        records = await history(store, state.run_id)
    assert max(running_children(records)) == 2  # the plan's concurrency
    started = [r.node for r in records if r.kind == "start" and "." in (r.node or "")]
    done = {}
    for record in records:
        for node_id, node in record.nodes.items():
            if node.status is NodeStatus.COMPLETED:
                done.setdefault(node_id, record.seq)
    needs = {f"phases.{i['id']}": [f"phases.{n}" for n in i.get("needs", [])] for i in SIX}
    for record in records:
        if record.kind == "start" and record.node in needs:
            assert all(done[need] < record.seq for need in needs[record.node]), record.node
    assert started[0] == "phases.a"
    assert set(started) == set(needs)
    assert sorted(state.data["log"]) == list("abcdef")  # each child once


async def test_results_are_gathered_in_plan_order_whatever_order_children_end_in() -> None:
    # Each child waits for the one after it: they end in reverse plan order.
    items = [{"id": f"i{n}", "word": str(n)} for n in range(5)]
    ended: dict[str, asyncio.Event] = {item["id"]: asyncio.Event() for item in items}
    order: list[str] = []

    async def reverse(ctx: ActionContext) -> ActionResult:
        me = ctx.item["id"]
        later = f"i{int(me[1:]) + 1}"
        if later in ended:
            await ended[later].wait()
        order.append(me)
        ended[me].set()
        return await child(ctx)

    # Every child must run at once (each waits for the next): the plan and the graph allow 5.
    text = GRAPH.replace("concurrency: 2", "concurrency: 5").replace(
        "reducers: {log: append}", "concurrency: 5\nreducers: {log: append}"
    )
    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(planner(items), reverse, text), {})
    assert order == [f"i{n}" for n in reversed(range(5))]
    assert state.data["outs"] == ["00", "11", "22", "33", "44"]
    assert state.data["seen"] == state.data["outs"]  # the node after the plan reads them
    assert state.nodes["phases.i3"].result == "33"


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        ([{"id": "a", "needs": ["b"]}, {"id": "b", "needs": ["a"]}], "phases 'a' -> 'b' -> 'a'"),
        ([{"id": "a", "needs": ["bb"]}, {"id": "b"}], "phase 'a' depends on 'bb', which is not"),
        ([{"id": "a"}, {"id": "a"}], "phases 0 and 1 are both 'a'"),
        ([{"id": "a", "size": 3}], "phase 'a' has field 'size'"),
        ([{"id": "a", "word": 7}], "phase 'a': word: 7 is not of type 'string'"),
        ([{"id": "a", "needs": ["a"]}], "phase 'a' depends on itself"),
        ([{"id": "bad id"}], "phase 0 has no usable 'id'"),
        ([{"id": str(n)} for n in range(9)], "it has 9 phases, more than the 8"),
        ({"phases": []}, "holds dict, not a list of items"),
    ],
)
async def test_a_bad_plan_goes_back_to_the_planner_then_fails_the_node(
    plan: Any, said: str
) -> None:
    asked: list[Mapping[str, Any]] = []

    async def plans(ctx: ActionContext) -> ActionResult:
        asked.append(dict(ctx.payload))
        return ActionResult(trigger="planned", data={"plan": plan})

    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(plans), {})
        records = await history(store, state.run_id)
    assert state.status is RunStatus.FAILED
    assert not any("." in node_id for node_id in state.nodes)  # no child on a refused plan
    assert [bool(p) for p in asked] == [False, True, True]  # the budget: three plans
    assert said in asked[1]["feedback"]
    assert said in asked[2]["feedback"]
    assert said in (state.nodes["phases"].error or state.errors[-1].message)
    refused = [e for r in records for e in r.events if e["kind"] == "plan_refused"]
    assert len(refused) == 3


async def test_a_replan_keeps_what_completed_and_plans_again_what_never_started() -> None:
    first = [{"id": "a"}, {"id": "bad", "fails": True}, {"id": "c", "needs": ["bad"]}]
    second = [{"id": "fix"}, {"id": "c", "needs": ["fix"]}]
    calls: list[str] = []
    seen: list[Mapping[str, Any]] = []

    async def counted(ctx: ActionContext) -> ActionResult:
        calls.append(ctx.node_id)
        return await child(ctx)

    async def plans(ctx: ActionContext) -> ActionResult:
        seen.append(dict(ctx.payload))
        return await planner(first, second)(ctx)

    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(plans, counted), {})
        records = await history(store, state.run_id)
    assert state.status is RunStatus.COMPLETED
    assert sorted(calls) == ["phases.a", "phases.bad", "phases.c", "phases.fix"]  # a ran once
    assert seen[1]["failed"] == ["bad"]
    assert seen[1]["skipped"] == ["c"]
    plan = state.plans["phases"]
    assert plan.version == 2
    assert plan.members == ("a", "fix", "c")
    assert state.nodes["phases.bad"].status is NodeStatus.FAILED  # kept in the run
    assert state.data["outs"] == ["aa", "fixfix", "cc"]
    versions = [r.plan.version for r in records if r.plan is not None]
    assert versions == [1, 2]


async def test_a_replan_may_not_reuse_the_id_of_a_child_that_failed() -> None:
    first = [{"id": "bad", "fails": True}]
    again = [{"id": "bad"}]
    asked: list[Mapping[str, Any]] = []

    async def plans(ctx: ActionContext) -> ActionResult:
        asked.append(dict(ctx.payload))
        return await planner(first, again, [{"id": "bad2"}])(ctx)

    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(plans), {})
    assert "phase 'bad' ended failed in plan version 1" in asked[2]["feedback"]
    assert state.status is RunStatus.COMPLETED
    assert state.plans["phases"].members == ("bad2",)


async def test_a_plan_of_no_items_joins_at_once() -> None:
    async with MemoryStore() as store:
        state = await engine(store).run(prepared_plan(planner([])), {})
        records = await history(store, state.run_id)
    assert state.status is RunStatus.COMPLETED
    assert state.data["outs"] == []
    assert [r.kind for r in records if r.node == "phases"][-2:] == ["expand", "join"]


async def test_replay_and_fork_of_a_planned_run() -> None:
    async with MemoryStore() as store:
        runs = engine(store)
        state = await runs.run(prepared_plan(planner(SIX)), {})
        records = await history(store, state.run_id)
        report = await runs.replay(state.run_id, graph=prepared_plan(planner(SIX)))
        assert report.identical, report.divergence
        # A fork at a step after the expansion has the children, and finishes the same.
        middle = next(r.seq for r in records if r.kind == "start" and r.node == "phases.e")
        forked = await runs.fork(state.run_id, at_seq=middle)
        resumed = await runs.resume(forked, graph=prepared_plan(planner(SIX)))
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.data["outs"] == state.data["outs"]
    assert set(resumed.nodes) == set(state.nodes)


# --------------------------------------------------------------------------- crash + resume


@st.composite
def plan_shapes(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    count = draw(st.integers(0, 6))
    items = []
    for index in range(count):
        needs = draw(st.lists(st.integers(0, index - 1), unique=True, max_size=2)) if index else []
        item: dict[str, Any] = {"id": f"x{index}", "needs": [f"x{n}" for n in needs]}
        if draw(st.integers(0, 5)) == 0:
            item["fails"] = True
        items.append(item)
    return items, draw(st.integers(1, 4))


def _yielding(turns: int) -> Act:
    async def work(ctx: ActionContext) -> ActionResult:
        for _ in range(turns):
            await asyncio.sleep(0)  # vary the interleaving of children
        return await child(ctx)

    return work


def _graph_with_limit(limit: int) -> str:
    return GRAPH.replace("with: {replan: true, budgets: {plans: 3}}", "").replace(
        "concurrency: 2", f"concurrency: {limit}"
    )


async def _crash_and_resume(
    store_of: Callable[[], Store], prepared: PreparedGraph, k: int
) -> RunState:
    """Drive ``k`` steps, leave (a crash: in-flight actions are dropped), then resume."""
    async with store_of() as store, engine(store).start(prepared, {}, run_id="crashed") as run:
        for _ in range(k):
            if await run.next() is None:
                break
    async with store_of() as store:
        state = await engine(store).get("crashed")
        if state.status.terminal:
            return state
        return await engine(store).resume("crashed", graph=prepared)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=plan_shapes(), k=st.integers(0, 40), turns=st.integers(0, 2))
def test_a_crash_at_any_step_then_resume_ends_as_an_uninterrupted_run(
    shape: tuple[list[dict[str, Any]], int], k: int, turns: int
) -> None:
    items, limit = shape
    prepared = prepared_plan(planner(items), _yielding(turns), _graph_with_limit(limit))

    async def scenario(path: Path) -> tuple[RunState, RunState]:
        async with MemoryStore() as store:
            straight = await engine(store).run(prepared, {})
        # SQLite: the file outlives the "process" that crashed, as it would.
        resumed = await _crash_and_resume(lambda: SqliteStore(path), prepared, k)
        return straight, resumed

    with tempfile.TemporaryDirectory() as folder:
        straight, resumed = asyncio.run(scenario(Path(folder) / "runs.db"))
    assert resumed.status is straight.status
    assert _data_without_order(resumed) == _data_without_order(straight)
    assert {k: (v.status, v.path, v.result) for k, v in resumed.nodes.items()} == {
        k: (v.status, v.path, v.result) for k, v in straight.nodes.items()
    }
    assert resumed.plans == straight.plans


def _data_without_order(state: RunState) -> dict[str, Any]:
    """The run's data; ``log`` as a sorted list: children that run together append in
    the order they end, which is timing, not behaviour (``outs`` is in plan order)."""
    data = dict(state.data)
    if "log" in data:
        data["log"] = sorted(data["log"])
    return data
