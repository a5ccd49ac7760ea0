"""The interpreter: readiness, concurrency, failures, data merging, middleware, snapshots."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, graph, loop_machine, prepared, returning
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import NodeOutcome, NodeStatus, RunStatus, replace
from phasegraph.store.memory import MemoryStore


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    n = draw(st.integers(1, 9))
    nodes = []
    for i in range(n):
        needs = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        nodes.append((f"n{i}", [f"n{j}" for j in needs]))
    return nodes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=dags(),
    concurrency=st.integers(1, 4),
    delays=st.lists(st.integers(0, 3), min_size=9, max_size=9),
)
def test_random_dag_runs_each_node_once_in_order_within_concurrency(nodes, concurrency, delays):
    """Every node runs exactly once, after all it needs, never above the concurrency limit."""
    started: list[str] = []
    finished: list[str] = []
    live = {"now": 0, "max": 0}

    def action_for(index: int):
        async def action(ctx: ActionContext) -> ActionResult:
            started.append(ctx.node_id)
            live["now"] += 1
            live["max"] = max(live["max"], live["now"])
            for _ in range(delays[index]):
                await asyncio.sleep(0)
            live["now"] -= 1
            finished.append(ctx.node_id)
            return ActionResult(trigger="ok")

        return action

    definition = graph(nodes, concurrency=concurrency)
    actions = {(node_id, "run"): action_for(i) for i, (node_id, _) in enumerate(nodes)}

    async def scenario():
        async with MemoryStore() as store:
            return await engine(store).run(prepared(definition, actions))

    state = asyncio.run(scenario())
    assert state.status is RunStatus.COMPLETED
    assert sorted(started) == sorted(node_id for node_id, _ in nodes)
    assert len(started) == len(set(started))
    for node_id, needs in nodes:
        for need in needs:
            assert finished.index(need) < started.index(node_id)
    assert live["max"] <= concurrency


async def test_actions_finishing_in_the_same_turn_are_taken_in_graph_order():
    """A result already waiting does not jump ahead of one from earlier in graph order
    that finishes in the same loop turn: the loop runs once before results are taken."""
    calls = {"w": 0}

    async def work(ctx: ActionContext) -> ActionResult:
        calls["w"] += 1
        return ActionResult(trigger="again" if calls["w"] < 3 else "stop")

    async def run(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok")

    definition = graph(
        [("w", []), ("y", [])], machines=[loop_machine()], machine="loop", concurrency=2
    )
    definition = replace(
        definition, nodes=(definition.nodes[0], replace(definition.nodes[1], machine="task"))
    )
    actions = {("w", "work"): work, ("y", "run"): run}
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(prepared(definition, actions))
        history = await eng.history(state.run_id)
    moved = [(r.node, r.trigger) for r in history if r.kind == "transition"]
    assert moved == [("w", "again"), ("w", "again"), ("w", "stop"), ("y", "ok")]


async def test_head_snapshot_equals_interpreter_state_at_every_step():
    """With deltas between snapshots, the state rebuilt from the store matches at each step."""
    calls = {"n": 0}

    async def work(ctx: ActionContext) -> ActionResult:
        calls["n"] += 1
        trigger = "stop" if calls["n"] >= 12 else "again"
        return ActionResult(trigger=trigger, data={"count": calls["n"], f"k{calls['n'] % 3}": 1})

    definition = graph([("a", []), ("b", ["a"])], machine="loop")
    actions = {("a", "work"): work, ("b", "work"): returning("stop", {"tail": True})}
    async with MemoryStore() as store:
        eng = engine(store, checkpoint_every=5)
        async with eng.start(prepared(definition, actions)) as run:
            seqs = []
            async for record in run:
                seqs.append(record.seq)
                assert await eng.get(run.run_id) == run.state
            assert seqs == list(range(1, len(seqs) + 1))
            for seq in seqs:
                at = await eng.get(run.run_id, seq)
                assert at.seq == seq
        assert run.state.status is RunStatus.COMPLETED
        assert run.state.data["count"] == 12


async def test_failed_node_skips_dependents_and_fails_the_run():
    definition = graph([("a", []), ("b", ["a"]), ("c", ["b"]), ("side", [])])
    actions = {
        ("a", "run"): returning("fail"),
        ("b", "run"): returning("ok"),
        ("c", "run"): returning("ok"),
        ("side", "run"): returning("ok"),
    }
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, actions))
    assert state.status is RunStatus.FAILED
    assert state.nodes["a"].status is NodeStatus.FAILED
    assert state.nodes["b"].status is state.nodes["c"].status is NodeStatus.SKIPPED
    assert "'a' failed upstream" in (state.nodes["b"].error or "")
    assert "'a' failed upstream" in (state.nodes["c"].error or "")
    assert state.nodes["side"].outcome is NodeOutcome.SUCCESS
    assert [e.node for e in state.errors] == ["a"]


async def test_illegal_trigger_fails_node_naming_legal_triggers():
    definition = graph([("a", [])])
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, {("a", "run"): returning("nope")}))
    assert state.status is RunStatus.FAILED
    error = state.nodes["a"].error or ""
    assert "'nope'" in error
    assert "legal triggers: fail, ok" in error


async def test_action_exception_is_recorded_not_raised():
    async def boom(ctx: ActionContext) -> ActionResult:
        raise ValueError("the model said no")

    definition = graph([("a", [])])
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, {("a", "run"): boom}))
    assert state.status is RunStatus.FAILED
    # The type, the message and the line that raised it (user code: this test).
    message = state.errors[0].message
    assert message.startswith("ValueError: the model said no (raised at ")
    assert message.endswith("test_interpreter.py:153 in boom)")


async def test_unencodable_data_fails_node_and_commits_none_of_it():
    definition = graph([("a", [])])
    bad = returning("ok", {"fine": 1, "handle": object()})
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, {("a", "run"): bad}))
    assert state.status is RunStatus.FAILED
    assert "fine" not in state.data
    assert "'a'" in (state.nodes["a"].error or "")
    assert "'handle'" in state.nodes["a"].error


async def test_unordered_writers_of_same_key_conflict_but_reducer_combines():
    definition = graph([("a", []), ("b", [])])
    actions = {("a", "run"): returning("ok", {"k": [1]}), ("b", "run"): returning("ok", {"k": [2]})}
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(prepared(definition, actions))
        assert state.status is RunStatus.FAILED
        error = " ".join(n.error or "" for n in state.nodes.values())
        assert "'a'" in error
        assert "'b'" in error
        assert "'k'" in error
        merged = await eng.run(
            prepared(replace(graph([("a", []), ("b", [])], reducers={"k": "append"})), actions)
        )
    assert merged.status is RunStatus.COMPLETED
    assert merged.data["k"] == [1, 2]


async def test_ordered_writers_may_overwrite():
    definition = graph([("a", []), ("b", ["a"])])
    actions = {("a", "run"): returning("ok", {"k": 1}), ("b", "run"): returning("ok", {"k": 2})}
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, actions))
    assert state.status is RunStatus.COMPLETED
    assert state.data["k"] == 2


async def test_middleware_runs_as_an_onion():
    order: list[str] = []

    def layer(name: str):
        async def middleware(ctx, call_next):
            order.append(f"{name}:before")
            result = await call_next(ctx)
            order.append(f"{name}:after")
            return result

        return middleware

    async def action(ctx: ActionContext) -> ActionResult:
        order.append("action")
        return ActionResult(trigger="ok")

    from phasegraph.run._middleware import chain

    wrapped = chain((layer("outer"), layer("inner")), action)
    definition = graph([("a", [])])
    async with MemoryStore() as store:
        await engine(store).run(prepared(definition, {("a", "run"): wrapped}))
    assert order == ["outer:before", "inner:before", "action", "inner:after", "outer:after"]


async def test_timing_middleware_from_graph_records_duration():
    definition = graph([("a", [])], middleware=["timing"])
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(prepared(definition, {("a", "run"): returning("ok")}))
        history = await eng.history(state.run_id)
    transition = next(r for r in history if r.kind == "transition")
    assert transition.result["output"]["duration_ms"] >= 0


async def test_budget_guard_stops_runaway_loop():
    definition = graph([("a", [])], machine="loop", machines=[loop_machine(limit=5)])
    async with MemoryStore() as store:
        state = await engine(store).run(prepared(definition, {("a", "work"): returning("again")}))
    node = state.nodes["a"]
    assert node.path == ("exhausted",)
    assert node.counters["steps"] == 5
    assert state.status is RunStatus.FAILED


@pytest.mark.parametrize("checkpoint_every", [1, 4, 64])
async def test_resume_after_abandoning_equals_uninterrupted(checkpoint_every):
    """Stop after a few steps (as a crash would), resume, and end where a straight run ends."""

    async def work(ctx: ActionContext) -> ActionResult:
        done = ctx.counters["steps"]
        return ActionResult(trigger="stop" if done >= 7 else "again", data={"n": done})

    definition = graph([("a", []), ("b", ["a"])], machine="loop")
    acts = {("a", "work"): work, ("b", "work"): returning("stop", {"b": 1})}
    async with MemoryStore() as store:
        straight = await engine(store).run(prepared(definition, acts))
    async with MemoryStore() as store:
        eng = engine(store, checkpoint_every=checkpoint_every)
        async with eng.start(prepared(definition, acts)) as run:
            for _ in range(4):
                await run.next()
            run_id = run.run_id
        resumed = await eng.resume(run_id, graph=prepared(definition, acts))
    assert resumed.status is straight.status is RunStatus.COMPLETED
    assert resumed.data == straight.data
    assert {k: (v.path, v.counters, v.status) for k, v in resumed.nodes.items()} == {
        k: (v.path, v.counters, v.status) for k, v in straight.nodes.items()
    }
    assert resumed.seq == straight.seq


class _CountingStore(MemoryStore):
    """Counts the full snapshots commits carry, and the bytes of every commit."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[int] = []
        self.sizes: dict[int, tuple[int, int]] = {}  # seq -> record bytes, snapshot bytes

    async def commit(self, lease, commit):
        await super().commit(lease, commit)
        self.sizes[commit.seq] = (len(commit.record), len(commit.snapshot or b""))
        if commit.snapshot is not None:
            self.snapshots.append(commit.seq)


async def test_checkpoints_wait_for_records_to_outweigh_a_large_unchanged_state():
    """A large state is snapshotted only when the records since its last snapshot add up
    to half its size, capped at eight intervals."""

    async def work(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="stop" if ctx.counters["steps"] >= 299 else "again")

    definition = graph([("a", [])], machine="loop")
    store = _CountingStore()
    eng = engine(store, checkpoint_every=16)
    state = await eng.run(prepared(definition, {("a", "work"): work}), {"blob": "x" * 50_000})
    assert state.status is RunStatus.COMPLETED
    assert store.snapshots == [0, 128, 256]
    for seq in (1, 127, 128, 200, state.seq):
        assert (await eng.get(state.run_id, seq)).seq == seq


@pytest.mark.parametrize("every", [16, 64])
async def test_a_small_state_is_snapshotted_once_the_records_outweigh_it_eight_times(every):
    """So a head read applies a dozen records, for at most an eighth more bytes written;
    never sooner than an eighth of an interval, never later than one."""

    async def work(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="stop" if ctx.counters["steps"] >= 299 else "again")

    definition = graph([("a", [])], machine="loop")
    store = _CountingStore()
    eng = engine(store, checkpoint_every=every)
    state = await eng.run(prepared(definition, {("a", "work"): work}))
    assert state.status is RunStatus.COMPLETED
    snaps = store.snapshots
    assert len(snaps) > state.seq // every + 2  # more often than every interval
    for index in range(1, len(snaps)):
        last, snap = snaps[index - 1], snaps[index]
        records = [store.sizes[seq][0] for seq in range(last + 1, snap + 1)]
        weight = 8 * store.sizes[last][1]
        assert max(every // 8, 1) <= snap - last <= every
        # written at the first step the records since outweighed it eight times over
        assert sum(records) >= weight or snap - last == every
        assert sum(records[:-1]) < weight or snap - last == max(every // 8, 1)
    records = sum(size for size, _ in store.sizes.values())
    snapshots = sum(size for _, size in store.sizes.values())
    assert snapshots - store.sizes[0][1] <= records / 8
    for seq in (1, 127, 128, 200, state.seq):
        assert (await eng.get(state.run_id, seq)).seq == seq
