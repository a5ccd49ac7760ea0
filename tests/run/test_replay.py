"""Fork (new run from any step, source untouched) and replay (re-drive, find divergence)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from types import MappingProxyType

import pytest

from builders import TESTS, engine, graph, loop_machine, prepared, returning
from phasegraph import Engine, open_store
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.cli import main
from phasegraph.errors import CodecError, InputError, RunNotFoundError, RunStateError
from phasegraph.model import (
    ActionDef,
    NodeDef,
    NodeStatus,
    RunStatus,
    StepRecord,
    TransitionDef,
    replace,
)
from phasegraph.run._replay import differing_fields
from phasegraph.store.memory import MemoryStore

CRASH = TESTS / "fixtures" / "crash"


async def _history_bytes(store, run_id: str) -> list[tuple[int, bytes]]:
    return [item async for item in store.history(run_id)]


def _two_step_graph():
    """a writes x; b writes y = 10 * x."""

    async def times_ten(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok", data={"y": ctx.data["x"] * 10})

    definition = graph([("a", []), ("b", ["a"])])
    return prepared(definition, {("a", "run"): returning("ok", {"x": 1}), ("b", "run"): times_ten})


# ---------------------------------------------------------------------------------- fork


async def test_fork_patches_data_resumes_and_leaves_source_untouched():
    plan = _two_step_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        done = await eng.run(plan)
        assert done.data["y"] == 10
        before = await _history_bytes(store, done.run_id)
        head_before = await store.read(done.run_id)

        at_a_done = next(
            r.seq
            for r in await eng.history(done.run_id)
            if r.node == "a" and r.kind == "transition"
        )
        fork_id = await eng.fork(done.run_id, at_a_done, {"x": 5})
        assert fork_id != done.run_id
        forked = await eng.get(fork_id)
        source_then = await eng.get(done.run_id, at_a_done)
        assert forked.seq == 0
        assert forked.status is RunStatus.RUNNING
        assert forked.nodes == source_then.nodes
        assert forked.data == {"x": 5}
        assert forked.graph_digest == done.graph_digest
        created = (await eng.history(fork_id))[0]
        assert created.kind == "created"
        assert created.result == {"forked_from": done.run_id, "at": at_a_done, "patched": ["x"]}

        finished = await eng.resume(fork_id, graph=plan)
        assert finished.status is RunStatus.COMPLETED
        assert finished.data == {"x": 5, "y": 50}
        # The source run's history and head are byte for byte what they were.
        assert await _history_bytes(store, done.run_id) == before
        assert await store.read(done.run_id) == head_before


async def test_fork_keeps_spent_budgets():
    """Budgets spent before the fork stay spent: the fork exhausts where the source did."""
    definition = graph([("a", [])], machine="loop", machines=[loop_machine(limit=6)])
    plan = prepared(definition, {("a", "work"): returning("again")})
    async with MemoryStore() as store:
        eng = engine(store)
        source = await eng.run(plan)
        assert source.nodes["a"].state == "exhausted"
        fork_id = await eng.fork(source.run_id, 3)
        forked = await eng.resume(fork_id, graph=plan)
    assert forked.nodes["a"].counters == source.nodes["a"].counters == {"steps": 6}
    assert forked.nodes["a"].steps == source.nodes["a"].steps
    assert forked.seq == source.seq - 3


async def test_fork_of_finished_run_is_a_finished_copy_that_resume_refuses():
    plan = _two_step_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        done = await eng.run(plan)
        fork_id = await eng.fork(done.run_id, patch={"note": "what if"})
        forked = await eng.get(fork_id)
        assert forked.status is RunStatus.COMPLETED
        assert forked.nodes == done.nodes
        assert forked.data == {**done.data, "note": "what if"}
        with pytest.raises(RunStateError, match="nothing to resume"):
            await eng.resume(fork_id, graph=plan)


async def test_fork_refusals_create_nothing():
    plan = _two_step_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        done = await eng.run(plan)
        with pytest.raises(RunNotFoundError, match=rf"{done.run_id}.*no seq 99"):
            await eng.fork(done.run_id, 99)
        with pytest.raises(RunNotFoundError, match="nope"):
            await eng.fork("nope", 0)
        with pytest.raises(CodecError, match="'handle'"):
            await eng.fork(done.run_id, 1, {"handle": object()})
        with pytest.raises(InputError, match="bad data keys"):
            await eng.fork(done.run_id, 1, {"": 1})
        assert [m.run_id for m in await eng.list_runs()] == [done.run_id]


def _gate_graph():
    """One node that waits for a human review, then a task after it."""
    gate = ActionDef(kind="human", config={"human": "review"}, triggers=("ok", "fail"))
    node = NodeDef(id="ask", machine="task", bind=MappingProxyType({"run": gate}))
    return prepared(graph([node, ("after", ["ask"])]), {("after", "run"): returning("ok")})


async def test_fork_of_waiting_run_rekeys_interrupts_and_takes_replies():
    plan = _gate_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        waiting = await eng.run(plan)
        assert waiting.status is RunStatus.WAITING
        fork_id = await eng.fork(waiting.run_id)
        forked = await eng.get(fork_id)
        assert forked.status is RunStatus.WAITING
        assert list(forked.interrupts) == [f"{fork_id}:ask:run"]
        done = await eng.reply(fork_id, f"{fork_id}:ask:run", "ok", graph=plan)
        assert done.status is RunStatus.COMPLETED
        assert (await eng.get(waiting.run_id)).status is RunStatus.WAITING


# -------------------------------------------------------------------------------- replay


def _mixed_graph():
    """Loops, an append reducer written concurrently, a raised error, a refused trigger."""
    calls = {"n": 0}

    async def loop(ctx: ActionContext) -> ActionResult:
        calls["n"] += 1
        trigger = "stop" if ctx.steps >= 3 else "again"
        return ActionResult(trigger=trigger, data={"log": [ctx.steps]}, output={"n": ctx.steps})

    async def boom(ctx: ActionContext) -> ActionResult:
        calls["n"] += 1
        raise ValueError("the model said no")

    nodes = [
        NodeDef(id="a", machine="loop"),
        NodeDef(id="b", machine="loop"),
        NodeDef(id="c", machine="task", needs=("a",)),
        NodeDef(id="d", machine="task", needs=("b",)),
        NodeDef(id="e", machine="task", needs=("d",)),
    ]
    definition = graph(nodes, reducers={"log": "append"}, concurrency=2)
    actions = {
        ("a", "work"): loop,
        ("b", "work"): loop,
        ("c", "run"): boom,
        ("d", "run"): returning("nope"),
        ("e", "run"): returning("ok"),
    }
    return prepared(definition, actions), calls


async def test_replay_of_real_run_is_identical_and_runs_no_action():
    plan, calls = _mixed_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(plan)
        assert state.status is RunStatus.FAILED
        assert state.nodes["e"].status is NodeStatus.SKIPPED
        assert len(state.data["log"]) == 8
        ran = calls["n"]
        report = await eng.replay(state.run_id, graph=plan)
    assert calls["n"] == ran
    assert report.identical, report.divergence
    assert (report.steps, report.head) == (state.seq, state.seq)
    assert not report.graph_changed


async def test_replay_through_human_gate_reply_and_cancel_is_identical():
    plan = _gate_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        first = await eng.run(plan)
        await eng.reply(first.run_id, f"{first.run_id}:ask:run", "ok", graph=plan)
        second = await eng.run(plan)
        await eng.cancel(second.run_id, "changed my mind", graph=plan)
        kinds = {r.kind for r in await eng.history(first.run_id)}
        kinds |= {r.kind for r in await eng.history(second.run_id)}
        assert {"wait", "reply", "cancel"} <= kinds
        for run_id in (first.run_id, second.run_id):
            report = await eng.replay(run_id, graph=plan)
            assert report.identical, report.divergence


async def test_replay_of_fork_is_identical():
    plan = _two_step_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        done = await eng.run(plan)
        fork_id = await eng.fork(done.run_id, 2, {"x": 7})
        await eng.resume(fork_id, graph=plan)
        report = await eng.replay(fork_id, graph=plan)
    assert report.identical
    assert report.steps == 2


async def test_replay_with_changed_dest_reports_first_divergent_step():
    plan, _ = _mixed_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(plan)
        # In the changed loop machine, `stop` ends in `exhausted` instead of `done`.
        loop = loop_machine()
        changed_loop = replace(
            loop,
            transitions=tuple(
                TransitionDef(trigger="stop", source=("work",), dest="exhausted")
                if t.trigger == "stop"
                else t
                for t in loop.transitions
            ),
        )
        definition = replace(
            plan.definition,
            machines=MappingProxyType({**plan.definition.machines, "loop": changed_loop}),
            digest="digest-changed",
        )
        changed = prepared(definition, {})
        report = await eng.replay(state.run_id, graph=changed)
        first_stop = next(r for r in await eng.history(state.run_id) if r.trigger == "stop")
    divergence = report.divergence
    assert divergence is not None
    assert report.graph_changed
    assert (divergence.seq, divergence.node) == (first_stop.seq, first_stop.node)
    assert report.steps == first_stop.seq - 1
    assert divergence.recorded.dest == ("done",)
    assert divergence.replayed is not None
    assert divergence.replayed.dest == ("exhausted",)
    assert divergence.fields == ("dest", "nodes")


async def test_replay_names_a_step_the_changed_graph_cannot_take():
    actions = {("a", "run"): returning("ok"), ("b", "run"): returning("ok")}
    plan = prepared(graph([("a", []), ("b", [])], concurrency=2), actions)
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(plan)
        # With concurrency 1, b cannot start while a runs: the recorded seq 2 starts b.
        changed = prepared(graph([("a", []), ("b", [])], concurrency=1, name="serial"), {})
        report = await eng.replay(state.run_id, graph=changed)
    divergence = report.divergence
    assert divergence is not None
    assert (divergence.seq, divergence.node, divergence.recorded.kind) == (2, "b", "start")
    assert divergence.replayed is None
    assert "would wait for the action of node 'a'" in divergence.reason
    assert report.steps == 1


async def test_replay_without_a_node_diverges_where_the_run_would_end():
    plan = _two_step_graph()
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(plan)
        # Without node b, the run completes with a (seq 2), where it recorded "running".
        smaller = prepared(graph([("a", [])], name="smaller"), {})
        report = await eng.replay(state.run_id, graph=smaller)
    divergence = report.divergence
    assert divergence is not None
    assert (divergence.seq, divergence.node, divergence.fields) == (2, "a", ("status",))
    assert divergence.recorded.status is RunStatus.RUNNING
    assert divergence.replayed is not None
    assert divergence.replayed.status is RunStatus.COMPLETED


def test_differing_fields_compares_canonically():
    time = StepRecord(seq=1, time=_now(), kind="transition").time
    a = StepRecord(seq=1, time=time, kind="transition", data=MappingProxyType({"k": [1, 2]}))
    same = replace(a, data=MappingProxyType({"k": (1, 2)}))
    other = replace(a, data=MappingProxyType({"k": [1, True]}), status=RunStatus.FAILED)
    assert differing_fields(a, same) == ()
    assert differing_fields(a, other) == ("status", "data")


def _now():
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------------------ CLI


def _copy_crash_graph(where: Path, *, budget: int | None = None) -> Path:
    shutil.copy(CRASH / "crash_actions.py", where / "crash_actions.py")
    text = (CRASH / "crash.yaml").read_text(encoding="utf-8")
    if budget is not None:
        text = text.replace(
            "    needs: [a]\n    writes: [b]\n",
            f"    needs: [a]\n    writes: [b]\n    with:\n      budgets: {{steps: {budget}}}\n",
        )
        assert "budgets" in text
    path = where / "crash.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def _records(url: str, run_id: str) -> list[StepRecord]:
    async with open_store(url) as store:
        return await Engine(store).history(run_id)


def test_cli_fork_set_then_resume(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/runs.db"
    log = tmp_path / "log.txt"
    run = ["--store", url, "-q"]
    inputs = ["--input", f"log={log}", "--input", "loops=2"]
    code, _, err = _cli(capsys, "run", str(CRASH / "crash.yaml"), "--run-id", "src", *inputs, *run)
    assert code == 0, err
    history = asyncio.run(_records(url, "src"))
    a_done = next(r.seq for r in history if r.node == "a" and r.trigger == "stop")

    fork = ["fork", "src", "--at", str(a_done), "--set", "a=100", "--no-run"]
    code, out, err = _cli(capsys, *fork, *run)
    assert code == 0, err
    fork_id = out.strip()
    assert fork_id not in ("", "src")
    code, out, err = _cli(capsys, "resume", fork_id, "--json", *run)
    assert code == 0, err
    assert json.loads(out)["status"] == "completed"
    code, out, err = _cli(capsys, "show", fork_id, "--json", *run)
    assert json.loads(out)["data"] == {"a": 100, "b": 2, "c": 2, "total": 104}

    code, out, _ = _cli(capsys, "fork", "src", "--json", *run)
    assert code == 0
    view = json.loads(out)
    head = len(history) - 1
    assert (view["forked_from"], view["at"], view["status"]) == ("src", head, "completed")
    code, _, err = _cli(capsys, "fork", "src", "--at", "999", *run)
    assert code == 2
    assert "no seq 999" in err
    code, _, err = _cli(capsys, "fork", "src", "--set", "oops", *run)
    assert code == 2
    assert "KEY=VALUE" in err


def test_cli_replay_identical_then_lowered_budget_diverges(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/runs.db"
    log = tmp_path / "log.txt"
    graph_file = _copy_crash_graph(tmp_path)
    run = ["--store", url, "-q"]
    inputs = ["--input", f"log={log}", "--input", "loops=4"]
    assert _cli(capsys, "run", str(graph_file), "--run-id", "r", *inputs, *run)[0] == 0
    executions = log.read_text()

    code, out, _ = _cli(capsys, "replay", "r", *run)
    assert code == 0
    assert "identical" in out
    assert log.read_text() == executions  # no action ran

    # The same graph with node b's steps budget lowered from 1000 to 2: b's second
    # `again` now ends in `exhausted`.
    changed = tmp_path / "changed"
    changed.mkdir()
    changed_file = _copy_crash_graph(changed, budget=2)
    history = asyncio.run(_records(url, "r"))
    b_agains = [r for r in history if r.node == "b" and r.trigger == "again"]
    expected = b_agains[1]
    code, out, _ = _cli(capsys, "replay", "r", "--graph", str(changed_file), *run)
    assert code == 1
    assert f"diverged at seq {expected.seq}, node 'b'" in out
    assert "changed since the run started" in out
    code, out, _ = _cli(capsys, "replay", "r", "--graph", str(changed_file), "--json", *run)
    assert code == 1
    view = json.loads(out)
    assert view["identical"] is False
    divergence = view["divergence"]
    assert (divergence["seq"], divergence["node"]) == (expected.seq, "b")
    assert divergence["recorded"]["dest"] == ["work"]
    assert divergence["replayed"]["dest"] == ["exhausted"]
    # The recorded step reads exactly as `history --json` shows it: one shape of a record.
    code, out, _ = _cli(capsys, "history", "r", "--json", *run)
    assert code == 0
    assert divergence["recorded"] == json.loads(out)[expected.seq]
    # The run status may differ too, depending on how far c had got (threads race).
    assert {"dest", "nodes"} <= set(divergence["fields"])
    assert log.read_text() == executions

    code, _, err = _cli(capsys, "replay", "missing", *run)
    assert code == 2
    assert "missing" in err
