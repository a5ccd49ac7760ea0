"""``python:`` actions' ``timeout``: an async call is cancelled, a sync one abandoned."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from builders import TESTS
from phasegraph.actions import ActionContext
from phasegraph.actions._build import build_action
from phasegraph.actions._failures import classify_error
from phasegraph.api import Engine
from phasegraph.errors import ActionTimeoutError
from phasegraph.model import ActionDef, RunState, RunStatus
from phasegraph.store.memory import MemoryStore

ACTIONS = TESTS / "fixtures" / "interrupt" / "interrupt_actions.py"
FALLBACK = {
    "recover": {"python": "phasegraph.concerns.fallback:recover", "triggers": ["retry"]},
    "emergency": {"python": "phasegraph.concerns.fallback:emergency", "triggers": ["fail"]},
}


def write_graph(folder: Path, machine: str, bind: dict[str, Any]) -> Path:
    """A one-node graph file (node ``work``) beside a copy of the test actions."""
    shutil.copy(ACTIONS, folder / ACTIONS.name)
    path = folder / "graph.yaml"
    node = {"id": "work", "machine": machine, "bind": bind}
    path.write_text(json.dumps({"nodes": [node]}), encoding="utf-8")  # JSON is YAML
    return path


async def run_graph(store: MemoryStore, path: Path, **run_input: Any) -> RunState:
    return await Engine(store).run(str(path), run_input)


async def test_an_async_action_is_cancelled_at_its_timeout(tmp_path: Path) -> None:
    write_graph(tmp_path, "task", {})
    config = {"python": "interrupt_actions:slow", "timeout": 0.2}
    action = build_action(ActionDef(kind="python", config=config), tmp_path)
    ctx = ActionContext(
        run_id="r", node_id="x", state="run", hook="run",
        input={"calls": str(tmp_path / "calls")}, data={},
    )  # fmt: skip
    with pytest.raises(ActionTimeoutError) as caught:
        await action(ctx)
    assert str(caught.value) == "action of node 'x' ran past its timeout of 0.2 s"
    assert (caught.value.run_id, caught.value.node_id) == ("r", "x")
    classified = classify_error(caught.value)
    assert (classified["error_code"], classified["retryable"]) == ("timeout", True)


async def test_an_async_action_past_its_timeout_fails_its_node(tmp_path: Path) -> None:
    bind = {"run": {"python": "interrupt_actions:slow", "timeout": 0.2}}
    async with MemoryStore() as store:
        state = await run_graph(
            store, write_graph(tmp_path, "task", bind), calls=str(tmp_path / "c")
        )
    assert state.status is RunStatus.FAILED
    assert state.nodes["work"].error == "action of node 'work' ran past its timeout of 0.2 s"


async def test_a_fallback_chain_retries_an_async_action_past_its_timeout(tmp_path: Path) -> None:
    bind = {"main": {"python": "interrupt_actions:slow", "timeout": 0.2}, **FALLBACK}
    calls = tmp_path / "calls"
    async with MemoryStore() as store:
        path = write_graph(tmp_path, "fallback_chain", bind)
        state = await run_graph(store, path, calls=str(calls))
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["work"].path == ("recovered",)
    assert calls.read_text(encoding="utf-8").split() == ["work", "work"]
    failed, retried = state.errors
    assert failed.details["error_code"] == "timeout"
    assert failed.message == "action of node 'work' ran past its timeout of 0.2 s"
    assert retried.message.startswith("retry 1 of 1 after timeout: ")


async def test_a_sync_action_past_its_timeout_is_retried_and_its_late_result_dropped(
    tmp_path: Path,
) -> None:
    bind = {"main": {"python": "interrupt_actions:slow_sync", "timeout": 0.2}, **FALLBACK}
    holdfile = tmp_path / "hold"
    holdfile.touch()
    run_input = {"calls": str(tmp_path / "calls"), "holdfile": str(holdfile)}
    async with MemoryStore() as store:
        engine = Engine(store)
        path = write_graph(tmp_path, "fallback_chain", bind)
        state = await engine.run(str(path), run_input)
        assert state.status is RunStatus.COMPLETED
        assert state.nodes["work"].path == ("recovered",)
        assert state.errors[0].details["error_code"] == "timeout"
        assert state.errors[0].message == "action of node 'work' ran past its timeout of 0.2 s"
        # The first call's thread is still blocked: release it and let its result arrive.
        name = f"phasegraph:{state.run_id}:work"
        threads = [t for t in threading.enumerate() if t.name == name]
        assert threads
        holdfile.unlink()
        for thread in threads:
            await asyncio.to_thread(thread.join)
        await asyncio.sleep(0)  # the loop runs the callback that would hand the result over
        after = await engine.get(state.run_id)
    assert after.seq == state.seq
    assert "late" not in after.data


async def test_a_function_that_blocks_the_loop_is_failed_when_it_returns_late(
    tmp_path: Path,
) -> None:
    bind = {"run": {"python": "interrupt_actions:blocking", "thread": False, "timeout": 0.2}}
    async with MemoryStore() as store:
        state = await run_graph(store, write_graph(tmp_path, "task", bind), block=0.3)
    assert state.status is RunStatus.FAILED
    assert state.nodes["work"].error == "action of node 'work' ran past its timeout of 0.2 s"
