"""Model turns are durable: resume never re-asks a committed turn; replay and fork never
ask at all; a fork with an edited conversation continues from the edit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from builders import cli_argv
from model_kit import ENDPOINT_VARIABLES, agent_node, call, graph_text, run_agent
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.store import open_store


def script_turns(*slow: int) -> list[dict]:
    """Three tool-calling turns and an answer; turn numbers in ``slow`` hang for a minute."""
    turns: list[dict] = [
        {"tool_calls": [call("list_files", path=".", recursive=n % 2 == 0)]} for n in range(3)
    ]
    turns.append({"content": "finished"})
    return [{**t, "delay": 60} if n in slow else t for n, t in enumerate(turns)]


async def _wait(predicate, what: str) -> None:
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_sigkill_mid_conversation_then_resume_reasks_only_the_turn_in_flight(
    serve, tmp_path: Path
) -> None:
    # Turn 3 hangs: the process is killed while that request is in flight. The script
    # then holds the same turn again (without the delay) for the resumed run.
    turns = script_turns(2)
    server = await serve([*turns[:3], script_turns()[2], turns[3]])
    node = agent_node({"tools": ["list_files"]}, settings={"workspace": str(tmp_path)})
    graph = tmp_path / "agent.yaml"
    graph.write_text(graph_text(node), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
    env["PHASEGRAPH_LLM_BASE_URL"] = server.base_url
    common = ["--store", store, "--json", "--quiet"]

    run = await asyncio.create_subprocess_exec(
        *cli_argv("run", str(graph), "--input", "task=list", *common),
        # The killed writer's lease lapses in two seconds (the resume keeps the default).
        env={**env, "PHASEGRAPH_LEASE_TTL": "2"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await _wait(lambda: server.request_count == 3, "the third model request")
    run.send_signal(signal.SIGKILL)
    await run.wait()
    await asyncio.sleep(2.2)

    async with open_store(store) as opened:
        [summary] = await Engine(opened).list_runs()
        run_id = summary.run_id
        before = await Engine(opened).get(run_id)
    assert before.status is RunStatus.RUNNING  # two turns committed, the third in flight
    resume = await asyncio.create_subprocess_exec(
        *cli_argv("resume", run_id, *common),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await resume.communicate()
    assert resume.returncode == 0, err.decode()

    asked = [json.dumps(r["messages"], sort_keys=True) for r in server.requests]
    assert server.request_count == 5
    assert asked[3] == asked[2]  # only the turn in flight was asked again
    assert len(set(asked)) == 4  # every committed turn was asked exactly once
    assert json.loads(out)["status"] == "completed"


async def test_replay_and_fork_never_call_the_model_and_a_fork_continues_from_an_edit(
    serve, tmp_path: Path
) -> None:
    server = await serve([*script_turns()[:2], {"content": "wrong answer"}, {"content": "right"}])
    node = agent_node({"tools": ["list_files"]}, settings={"workspace": str(tmp_path)})
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    graph = tmp_path / "agent.yaml"
    graph.write_text(graph_text(node), encoding="utf-8")
    state, history = await run_agent(graph_text(node), store_url=store_url, path=graph)
    assert state.data["conversation"][-1]["content"] == "wrong answer"
    assert server.request_count == 3

    async with open_store(store_url) as store:
        engine = Engine(store)
        report = await engine.replay(state.run_id)
        assert report.identical
        assert report.steps == len(history) - 1
        # Fork at the step that recorded the wrong answer, with that turn replaced by a
        # user's correction: the fork asks the model again from there.
        [wrong] = [r for r in history if r.trigger == "answer"]
        # The record keeps only what the step appended: the wrong answer.
        assert wrong.appended["conversation"] == [{"role": "assistant", "content": "wrong answer"}]
        before = (await engine.get(state.run_id, wrong.seq - 1)).data["conversation"]
        edited = [*before, {"role": "user", "content": "That is wrong: say right."}]
        fork = await engine.fork(state.run_id, wrong.seq - 1, {"conversation": edited})
        assert server.request_count == 3  # neither replay nor fork asked the model
        forked = await engine.resume(fork)
    assert forked.status is RunStatus.COMPLETED
    assert server.request_count == 4
    assert server.requests[-1]["messages"][-1] == {
        "role": "user",
        "content": "That is wrong: say right.",
    }
    assert forked.data["conversation"][-1]["content"] == "right"
