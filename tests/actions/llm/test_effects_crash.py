"""Side effects across real crashes: each point of the timeline, each policy, a real receiver.

An agent's one ``act`` step makes three ``run_command`` calls (``once`` effects); each
posts to a receiver in this process that counts effects and the ``Idempotency-Key`` each
carried. ``drive.py`` runs the graph and SIGKILLs its own process at one point of call
1's timeline, found in the records it commits (not by timing):

* ``intent:1:before``: before call 1's intent is committed (call 0 is done);
* ``intent:1:after``: after the intent, before the effect;
* ``effect:1:before``: after the effect, before its result is committed;
* ``effect:1:after``: after the result is committed.

``phasegraph resume`` (the real command line) then finishes the run, and the receiver
says how many times each call's effect happened.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from builders import TESTS, cli_argv
from http_kit import served
from model_kit import ENDPOINT_VARIABLES, call, graph_text
from phasegraph import Engine, open_store
from phasegraph.model import RunState, RunStatus, StepRecord

FIXTURES = TESTS / "fixtures" / "effects"
CALLS = 3


class Receiver:
    """Counts effects; with ``dedupe``, honours the Idempotency-Key (one effect per key)."""

    def __init__(self, dedupe: bool = False) -> None:
        self.dedupe = dedupe
        self.posts: Counter[str] = Counter()  # every request, by key
        self.effects: Counter[str] = Counter()  # what happened, by key
        self.url = ""

    async def effect(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key", "")
        self.posts[key] += 1
        if not (self.dedupe and self.effects[key]):
            self.effects[key] += 1
        return web.Response(text=f"done {key}")

    async def seen(self, request: web.Request) -> web.Response:
        key = request.query["key"]
        return web.json_response({"seen": bool(self.effects[key]), "answer": f"done {key}"})


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/effect", got.effect)
    app.router.add_get("/seen", got.seen)
    async with served(app) as url:
        got.url = url
        yield got


def _graph(tmp_path: Path, **binding: Any) -> Path:
    node = {
        "id": "agent",
        "machine": "agent",
        "with": {"workspace": str(tmp_path)},
        "bind": {
            "think": {"llm": {"model": "main", "prompt": "go", "tools": ["run_command"]}},
            "act": {"tools": "conversation", **binding},
        },
    }
    path = tmp_path / "effects.yaml"
    path.write_text(graph_text(node), encoding="utf-8")
    shutil.copy(FIXTURES / "reconcile.py", tmp_path / "reconcile.py")  # found beside the graph
    return path


def _script(url: str) -> list[dict[str, Any]]:
    argv = [sys.executable, "-S", str(FIXTURES / "effect.py"), url]  # -S: a quicker start
    calls = [call("run_command", argv=argv) for _ in range(CALLS)]
    return [{"tool_calls": calls}, {"content": "all done"}]


class Scenario:
    """One graph, one store, one run: the killed driver, then the command line."""

    def __init__(self, tmp_path: Path, server_url: str, receiver: Receiver, **binding: Any):
        self.graph = _graph(tmp_path, **binding)
        self.store = f"sqlite:///{tmp_path / 'runs.db'}"
        self.run_id = "effects-run"
        self.receiver = receiver
        self.env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
        self.env["PHASEGRAPH_LLM_BASE_URL"] = server_url

    async def _exec(self, *argv: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def killed_at(self, point: str) -> int:
        run_input = json.dumps({"receiver": self.receiver.url})
        drive = FIXTURES / "drive.py"
        argv = (sys.executable, str(drive), self.store, str(self.graph), self.run_id, run_input)
        code, _, err = await self._exec(*argv, point)
        assert code in (0, -9), err
        return code

    async def cli(self, *args: str) -> tuple[int, str, str]:
        return await self._exec(*cli_argv(*args, "--store", self.store))

    async def state(self) -> tuple[RunState, list[StepRecord]]:
        async with open_store(self.store) as store:
            engine = Engine(store)
            return await engine.get(self.run_id), await engine.history(self.run_id)


def effect_id(index: int) -> str:
    return f"effects-run:agent:1:{index}"


def every_call_once(receiver: Receiver) -> None:
    assert receiver.effects == Counter({effect_id(i): 1 for i in range(CALLS)})


async def test_an_uninterrupted_step_commits_an_intent_and_a_result_per_call(
    serve, tmp_path: Path, receiver: Receiver
) -> None:
    server = await serve(_script(receiver.url))
    scenario = Scenario(tmp_path, server.base_url, receiver)
    assert await scenario.killed_at("never:0:before") == 0
    state, history = await scenario.state()

    assert state.status is RunStatus.COMPLETED
    ledger = [(r.kind, r.ledger.index) for r in history if r.ledger is not None]
    assert ledger == [(kind, i) for i in range(CALLS) for kind in ("intent", "effect")]
    results = [r.ledger.result for r in history if r.kind == "effect" and r.ledger]
    assert [r["stdout"].strip() for r in results if r] == [
        f"done {effect_id(i)}" for i in range(CALLS)
    ]
    assert state.nodes["agent"].ledger == ()  # dropped when the step itself committed
    every_call_once(receiver)


@pytest.mark.parametrize("point", ["intent:1:before", "effect:1:after"])
async def test_a_crash_outside_an_effect_resumes_without_asking_or_redoing(
    serve, tmp_path: Path, receiver: Receiver, point: str
) -> None:
    server = await serve(_script(receiver.url))
    scenario = Scenario(tmp_path, server.base_url, receiver)
    assert await scenario.killed_at(point) == -9
    code, _, err = await scenario.cli("resume", scenario.run_id, "--json", "--quiet")
    assert code == 0, err
    state, _ = await scenario.state()
    assert state.status is RunStatus.COMPLETED
    every_call_once(receiver)  # call 0 (and call 1 after its commit) never ran again
    assert server.request_count == 2


@pytest.mark.parametrize(
    ("point", "answer", "effects"),
    [
        # The effect never happened: a person says run it again; it happens once.
        ("intent:1:after", ["--trigger", "run_again"], 1),
        # It happened, its result was lost: a person says so; it is not run again.
        ("effect:1:before", ["--trigger", "happened", "--payload", 'result={"exit": 0}'], 1),
    ],
)
async def test_ask_parks_once_on_an_uncertain_effect_and_records_the_answer(
    serve, tmp_path: Path, receiver: Receiver, point: str, answer: list[str], effects: int
) -> None:
    server = await serve(_script(receiver.url))
    scenario = Scenario(tmp_path, server.base_url, receiver)  # on_unknown: ask (the default)
    assert await scenario.killed_at(point) == -9
    code, out, err = await scenario.cli("resume", scenario.run_id, "--json", "--quiet")
    assert code == 3, err  # waiting
    state, history = await scenario.state()
    [gate] = state.interrupts.values()
    assert gate.kind == "outcome_unknown"
    assert gate.payload["effect_id"] == effect_id(1)
    assert gate.payload["tool"] == "run_command"
    assert gate.payload["arguments"]["argv"][-1] == receiver.url
    assert [r.kind for r in history].count("wait") == 1

    code, out, err = await scenario.cli("status", scenario.run_id)
    assert "happened" in out, out
    assert "run_again" in out, out

    code, out, err = await scenario.cli("reply", scenario.run_id, "--id", gate.id, *answer)
    assert code == 0, err
    state, history = await scenario.state()
    assert state.status is RunStatus.COMPLETED
    assert receiver.effects[effect_id(1)] == effects
    every_call_once(receiver)
    [reply] = [r for r in history if r.kind == "reply"]
    assert reply.trigger == answer[1]
    assert [r.kind for r in history].count("wait") == 1


async def test_retry_runs_it_again_with_the_same_id_and_a_deduplicating_receiver_sees_one(
    serve, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.dedupe = True
    server = await serve(_script(receiver.url))
    scenario = Scenario(tmp_path, server.base_url, receiver, on_unknown="retry")
    assert await scenario.killed_at("effect:1:before") == -9
    code, _, err = await scenario.cli("resume", scenario.run_id, "--json", "--quiet")
    assert code == 0, err
    assert receiver.posts[effect_id(1)] == 2  # sent twice, with the one key
    every_call_once(receiver)


async def test_fail_fails_the_step_as_an_action_error_naming_the_call_and_its_effect_id(
    serve, tmp_path: Path, receiver: Receiver
) -> None:
    server = await serve(_script(receiver.url))
    scenario = Scenario(tmp_path, server.base_url, receiver, on_unknown="fail")
    assert await scenario.killed_at("effect:1:before") == -9
    code, _, err = await scenario.cli("resume", scenario.run_id, "--json", "--quiet")
    assert code == 1, err
    state, _ = await scenario.state()
    assert state.status is RunStatus.FAILED
    assert state.nodes["agent"].path == ("errored",)  # failed as its action would have
    error = state.errors[0].message
    assert "'run_command'" in error
    assert effect_id(1) in error
    assert "is unknown" in error
    assert receiver.effects[effect_id(1)] == 1
    assert effect_id(2) not in receiver.effects


@pytest.mark.parametrize("point", ["intent:1:after", "effect:1:before"])
async def test_reconcile_looks_the_effect_up_and_runs_it_only_if_it_did_not_happen(
    serve, tmp_path: Path, receiver: Receiver, point: str
) -> None:
    server = await serve(_script(receiver.url))
    scenario = Scenario(
        tmp_path,
        server.base_url,
        receiver,
        on_unknown="reconcile",
        reconcile="reconcile:looked_up",
    )
    assert await scenario.killed_at(point) == -9
    code, _, err = await scenario.cli("resume", scenario.run_id, "--json", "--quiet")
    assert code == 0, err
    every_call_once(receiver)
    _, history = await scenario.state()
    results = [r.ledger.result for r in history if r.ledger and r.ledger.index == 1]
    assert results[-1] is not None
    assert bool(results[-1].get("reconciled")) == (point == "effect:1:before")
