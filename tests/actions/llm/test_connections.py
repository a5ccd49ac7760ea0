"""Model calls reuse one client and its connection; the engine (or the loop) closes it.

Connections are counted where they arrive: at the scripted model server, over a real
loopback socket, with the real ``openai`` client on the other end.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from model_kit import agent_node, call, graph_text
from phasegraph.actions.llm._pool import loop_pool
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store
from phasegraph.testing import ScriptedModelServer

TURNS = 20


def _script(turns: int = TURNS) -> list[dict[str, Any]]:
    reads = [{"tool_calls": [call("list_files", path=".")]} for _ in range(turns)]
    return [*reads, {"content": "done"}]


def _agent_graph(workspace: Path, turns: int = TURNS, **settings: Any) -> str:
    node = agent_node(
        {"tools": ["list_files"]},
        settings={"workspace": str(workspace), "budgets": {"turns": turns + 1}, **settings},
    )
    return graph_text(node)


async def _until(condition: Callable[[], bool]) -> None:
    """Wait (up to a minute, on a busy machine) for the server to see what the client did."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never saw it")


async def test_an_agent_run_of_twenty_turns_opens_one_connection(serve, tmp_path: Path) -> None:
    server = await serve(_script())
    definition = load_graph_text(_agent_graph(tmp_path), name="agent.yaml")
    async with open_store("memory://") as store, Engine(store) as engine:
        state = await engine.run(definition, {"task": "look around"})
        assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
        assert server.request_count == TURNS + 1
        assert server.connections == 1
        assert server.open_connections == 1  # kept alive for the next call
    # Closing the engine closed the client: the server sees its connection end.
    await _until(lambda: server.open_connections == 0)


async def test_a_second_run_reuses_the_connection_and_after_close_a_new_one_opens(
    serve, tmp_path: Path
) -> None:
    server = await serve(_script(1), by_turn=True)  # every run asks the same turns
    definition = load_graph_text(_agent_graph(tmp_path, turns=1), name="agent.yaml")
    async with open_store("memory://") as store:
        engine = Engine(store)
        for _ in range(2):
            state = await engine.run(definition, {"task": "look"})
            assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
        assert server.connections == 1
        await engine.aclose()
        await _until(lambda: server.open_connections == 0)
        state = await engine.run(definition, {"task": "look"})  # a closed engine still works
        assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
        assert server.connections == 2
        await engine.aclose()
    await _until(lambda: server.open_connections == 0)


async def test_closing_an_engine_lets_a_call_in_flight_finish(serve, tmp_path: Path) -> None:
    server = await serve([{"content": "slow but sure", "delay": 0.5}])
    definition = load_graph_text(_agent_graph(tmp_path, turns=0), name="agent.yaml")
    async with open_store("memory://") as store:
        engine = Engine(store)
        running = asyncio.create_task(engine.run(definition, {"task": "answer"}))
        await _until(lambda: server.request_count == 1)
        await engine.aclose()  # the call is waiting for its answer: it keeps its client
        state = await running
    assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
    assert state.data["conversation"][-1]["content"] == "slow but sure"
    await _until(lambda: server.open_connections == 0)  # closed once the call ended


async def test_a_script_is_served_once_for_every_call(tmp_path: Path) -> None:
    (tmp_path / "answers.json").write_text(json.dumps(_script(3)), encoding="utf-8")
    graph = tmp_path / "agent.yaml"
    graph.write_text(_agent_graph(tmp_path, turns=3, llm={"script": "answers.json"}))
    async with open_store("memory://") as store, Engine(store) as engine:
        state = await engine.run(graph, {"task": "look"})
        assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
        assert state.data["conversation"][-1]["content"] == "done"
        # One scripted server and one client to it, for all four calls.
        assert (await loop_pool()).kept == 2
    assert (await loop_pool()).kept == 0


@pytest.fixture
def server_thread() -> Iterator[tuple[ScriptedModelServer, asyncio.AbstractEventLoop]]:
    """A scripted model served from a loop of its own, outliving the test's loops."""
    loop = asyncio.new_event_loop()
    server = ScriptedModelServer(_script(2))
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server, loop
    finally:
        asyncio.run_coroutine_threadsafe(server.aclose(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=60)
        loop.close()


def test_an_engine_never_closed_is_closed_with_its_loop(
    server_thread: tuple[ScriptedModelServer, asyncio.AbstractEventLoop],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, loop = server_thread
    monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", server.base_url)
    definition = load_graph_text(_agent_graph(tmp_path, turns=2), name="agent.yaml")

    async def run_without_closing() -> RunStatus:
        async with open_store("memory://") as store:
            return (await Engine(store).run(definition, {"task": "look"})).status

    assert asyncio.run(run_without_closing()) is RunStatus.COMPLETED
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert server.connections == 1

    async def closed() -> None:
        await _until(lambda: server.open_connections == 0)

    asyncio.run_coroutine_threadsafe(closed(), loop).result(timeout=120)
