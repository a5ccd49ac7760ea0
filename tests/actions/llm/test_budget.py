"""A run's budget for model calls: reserved before each call is sent, settled on its answer,
released when it fails; parallel agents share it without overspending, across SIGKILLs
between a reservation and its commit, and running out opens one gate."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import TESTS
from model_kit import ENDPOINT_VARIABLES, agent_node, call, graph_text
from phasegraph import Engine, open_store
from phasegraph.model import RunState, RunStatus, StepRecord, apply_records
from phasegraph.testing import ScriptedModelServer

LIMIT = 10_000
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}  # what each answer spends
MAX_TOKENS = 2_900  # with the prompt, estimated high, each call reserves about 3,000
TURN = {"tool_calls": [call("list_files", path=".")], "usage": USAGE}
DONE = {"content": "done", "usage": USAGE}


def _agents(tmp_path: Path, *, budget: dict[str, Any], **llm: Any) -> Path:
    """Two agents with nothing between them (they run in parallel), each with its own
    conversation, under one run budget."""
    nodes = []
    for node_id in ("a", "b"):
        request = {"tools": ["list_files"], "max_tokens": MAX_TOKENS, "conversation": node_id}
        node = agent_node(
            {**request, **llm}, settings={"workspace": str(tmp_path)}, node_id=node_id
        )
        node["bind"]["act"]["tools"] = node_id
        nodes.append(node)
    path = tmp_path / "agents.yaml"
    path.write_text(graph_text(*nodes, budget=budget), encoding="utf-8")
    return path


def _committed_totals(history: list[StepRecord]) -> Iterable[tuple[int, int]]:
    """(seq, spent + reserved tokens) after every step of the history."""
    state: RunState | None = None
    for record in history:
        if state is None:  # seq 0 holds the whole initial state
            state = RunState(
                run_id="r",
                graph="g",
                graph_source="g",
                graph_digest="",
                seq=0,
                status=RunStatus.RUNNING,
                input={},
                data=dict(record.data),
                nodes=dict(record.nodes),
                created_at=record.time,
                updated_at=record.time,
            )
            continue
        state = apply_records(state, [record])
        spent = sum(n.counters.get("tokens", 0) for n in state.nodes.values())
        held = sum(
            int(e.arguments.get("tokens", 0))
            for n in state.nodes.values()
            for e in n.ledger
            if e.index == -2
        )
        yield record.seq, spent + held


def _gates_opened(history: list[StepRecord]) -> int:
    return sum(1 for r in history for e in r.events if e.get("kind") == "budget_request")


async def test_parallel_agents_share_the_budget_and_one_gate_asks_for_more(
    serve, tmp_path: Path
) -> None:
    await serve([TURN] * 10 + [DONE], by_turn=True)
    graph = _agents(tmp_path, budget={"tokens": LIMIT})
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(str(graph), {"task": "list"})
        history = await engine.history(state.run_id)

        assert state.status is RunStatus.WAITING
        [gate] = state.interrupts.values()
        assert gate.kind == "budget"
        assert sorted(gate.payload["nodes"]) == ["a", "b"]  # both ran out: one gate
        assert _gates_opened(history) == 1
        assert max(total for _, total in _committed_totals(history)) <= LIMIT
        reserved = [r for r in history if r.kind == "reserve"]
        # Each call reserved its most: max_tokens and its prompt, estimated high.
        assert all(3_000 <= r.ledger.arguments["tokens"] <= 3_300 for r in reserved if r.ledger)

        # The reply raises the limit: both calls run again and the agents finish.
        state = await engine.reply(state.run_id, gate.id, "more", payload={"tokens": 40_000})
        history = await engine.history(state.run_id)
        replayed = await engine.replay(state.run_id)
    assert replayed.identical, replayed.divergence
    assert state.status is RunStatus.COMPLETED
    spent = sum(node.counters["tokens"] for node in state.nodes.values())
    assert spent == 2 * 11 * sum(USAGE.values())  # settled at what each answer used
    assert max(total for _, total in _committed_totals(history)) <= LIMIT + 40_000


async def test_money_is_priced_per_model_and_limits_the_run(serve, tmp_path: Path) -> None:
    await serve([TURN] * 10 + [DONE], by_turn=True)
    # 1,000 prompt tokens at 2 and 500 completion tokens at 10 a million: 0.007 a call.
    prices = {"main": {"input": 2.0, "output": 10.0}}
    graph = _agents(tmp_path, budget={"money": 0.05, "prices": prices})
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(str(graph), {"task": "list"})
        history = await engine.history(state.run_id)
    assert state.status is RunStatus.WAITING
    [gate] = state.interrupts.values()
    assert gate.kind == "budget"
    calls = sum(1 for r in history if r.trigger == "tool_calls")
    money = sum(node.counters.get("money", 0) for node in state.nodes.values())
    assert money == calls * 7_000  # millionths
    assert money <= 50_000
    # A call reserves its most: 2,900 completion tokens at 10 a million and more.
    first = next(r.ledger for r in history if r.kind == "reserve" and r.ledger)
    assert first.arguments["money"] >= 29_000


async def test_a_money_budget_refuses_a_model_without_a_price(serve, tmp_path: Path) -> None:
    server = await serve([TURN, {"content": "done"}], by_turn=True)
    graph = _agents(tmp_path, budget={"money": 1.0, "prices": {"other": {"input": 1, "output": 1}}})
    async with open_store("memory://") as store:
        state = await Engine(store).run(str(graph), {"task": "list"})
    assert state.status is RunStatus.FAILED
    assert "has no price in budget.prices" in (state.nodes["a"].error or state.errors[0].message)
    assert server.request_count == 0  # refused before anything was sent


async def test_a_failed_call_releases_its_reservation(serve, tmp_path: Path) -> None:
    server = await serve([{"error": 500, "message": "overloaded"}] * 4)
    graph = _agents(tmp_path, budget={"tokens": LIMIT}, retries=0)
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(str(graph), {"task": "list"})
        history = await engine.history(state.run_id)
    assert server.request_count == 2
    assert [r.kind for r in history].count("reserve") == 2  # each call reserved first
    assert state.status is RunStatus.FAILED
    for node in state.nodes.values():
        assert node.counters.get("tokens", 0) == 0  # released: nothing charged
        assert node.ledger == ()
    [*_, (_, last)] = _committed_totals(history)
    assert last == 0


async def test_budget_out_fires_the_trigger_the_binding_maps(serve, tmp_path: Path) -> None:
    await serve([TURN] * 10 + [DONE], by_turn=True)
    graph = _agents(tmp_path, budget={"tokens": LIMIT})
    text = json.loads(graph.read_text(encoding="utf-8"))
    for node in text["nodes"]:
        node["bind"]["think"]["on_outcome"] = {"budget_out": "answer"}
    graph.write_text(json.dumps(text), encoding="utf-8")
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(str(graph), {"task": "list"})
        history = await engine.history(state.run_id)
    assert state.status is RunStatus.COMPLETED  # no gate: each agent answered instead
    assert _gates_opened(history) == 0
    outs = [r for r in history if r.trigger == "answer"]
    assert {r.node for r in outs} == {"a", "b"}
    assert all("left" in r.result["payload"] for r in outs)


# -- crashes between a reservation and its commit -------------------------------------

DRIVE = TESTS / "fixtures" / "budget" / "drive.py"


async def _drive(env: dict[str, str], store: str, graph: Path, kill_after: int) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DRIVE),
        store,
        str(graph),
        "budget-run",
        str(kill_after),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate()
    assert process.returncode in (0, -9), err.decode()
    assert process.returncode is not None
    return process.returncode


@settings(
    max_examples=3,  # each example starts two or three processes: seconds each
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(kills=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=2))
async def test_sigkills_between_reservation_and_commit_never_overspend(
    tmp_path_factory, kills: list[int]
) -> None:
    tmp_path = tmp_path_factory.mktemp("budget")
    server = ScriptedModelServer([TURN] * 10 + [DONE], by_turn=True)
    await server.start()
    try:
        env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
        env["PHASEGRAPH_LLM_BASE_URL"] = server.base_url
        graph = _agents(tmp_path, budget={"tokens": LIMIT})
        store = f"sqlite:///{tmp_path / 'runs.db'}"
        codes = [await _drive(env, store, graph, kill_after) for kill_after in [*kills, 0]]
        assert codes[0] == -9  # the first drive was killed: its run reserves more often
        async with open_store(store) as opened:
            engine = Engine(opened)
            state = await engine.get("budget-run")
            history = await engine.history("budget-run")
            # Replay re-derives every step, the charges of crashed calls included.
            replayed = await engine.replay("budget-run")
        assert replayed.identical, replayed.divergence
        # What the provider was asked for (every answer it gave used 1,500 tokens), and
        # what the run committed at every step, stay within the budget.
        assert server.request_count * sum(USAGE.values()) <= LIMIT
        assert max(total for _, total in _committed_totals(history)) <= LIMIT
        assert state.status is RunStatus.WAITING
        [gate] = state.interrupts.values()
        assert gate.kind == "budget"
        assert _gates_opened(history) == 1
        # Every reservation a killed process left was charged at its most, once.
        # (A kill can leave both parallel agents' reservations.)
        charged = [r for r in history if r.kind == "settle"]
        assert len(charged) <= 2 * len(kills)
        for record in charged:
            assert record.result["charged"]["tokens"] >= 3_000
    finally:
        await server.aclose()


async def test_stop_fails_every_node_the_gate_holds(serve, tmp_path: Path) -> None:
    await serve([TURN] * 10 + [DONE], by_turn=True)
    graph = _agents(tmp_path, budget={"tokens": LIMIT})
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(str(graph), {"task": "list"})
        [gate] = state.interrupts.values()
        state = await engine.reply(state.run_id, gate.id, "stop", payload={"reason": "enough"})
    assert state.status is RunStatus.FAILED
    for node in state.nodes.values():
        assert node.error == "the run's budget ran out; answered stop: enough"
    assert state.interrupts == {}
