"""The reply route over a real socket: a gate's reviewers shown, a reply bound to its step.

The server here has its single bearer token and no principals, so it names no actor: a
reply is held to the gate's step, not to its reviewers (see test_gate_reviewers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_server import create, serving, settings_for, wait_for

from builders import REPO
from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

REVIEWED = """
graph: reviewed_gate
nodes:
  - id: review
    machine: task
    bind:
      run:
        human: approval
        reviewers: [alice, "group:release"]
        payload: {question: "ship it?"}
        triggers: [ok, fail]
"""


async def _reply(client: Any, run_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await client.post(f"/runs/{run_id}/reply", json=body)
    return response.status, await response.json()


async def test_a_reply_quotes_the_gates_step_and_applies_once(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = await create(client, REVIEWED, {})
        waiting = await wait_for(client, run_id, lambda v: v["status"] == "waiting")
        (gate,) = waiting["interrupts"]
        assert gate["reviewers"] == ["alice", "group:release"]
        step = gate["seq"]
        assert step == waiting["seq"]  # the gate opened on the run's last step

        status, problem = await _reply(
            client, run_id, {"interrupt_id": gate["id"], "trigger": "ok", "step": "one"}
        )
        assert status == 400
        assert "body.step" in problem["detail"]

        stale = {"interrupt_id": gate["id"], "trigger": "ok", "step": step - 1}
        status, problem = await _reply(client, run_id, stale)
        assert status == 409
        assert problem["code"] == "stale_reply"
        assert problem["gate"] == gate["id"]
        assert problem["current_step"] == step
        assert (await wait_for(client, run_id, lambda v: True))["seq"] == waiting["seq"]

        answer = {"interrupt_id": gate["id"], "trigger": "ok", "step": step}
        status, done = await _reply(client, run_id, answer)
        assert status == 200, done
        finished = await wait_for(client, run_id, lambda v: v["status"] == "completed")

        # The same reply again: refused, naming the step that answered the gate.
        status, problem = await _reply(client, run_id, answer)
        assert status == 409
        assert problem["code"] == "gate_answered"
        assert problem["answered_at"] == step + 1
        # Without a step too: a gate answered already is not answered twice.
        status, problem = await _reply(
            client, run_id, {"interrupt_id": gate["id"], "trigger": "ok"}
        )
        assert status == 409
        assert problem["code"] == "gate_answered"
        assert (await wait_for(client, run_id, lambda v: True))["seq"] == finished["seq"]

        history = await (await client.get(f"/runs/{run_id}/history")).json()
        replies = [r for r in history["records"] if r["kind"] == "reply"]
        assert len(replies) == 1
        assert "actor" in replies[0]  # null: this server names no principals
        opened = [r for r in history["records"] if r["kind"] == "wait"]
        assert opened[0]["interrupts"][gate["id"]]["reviewers"] == ["alice", "group:release"]
        assert opened[0]["interrupts"][gate["id"]]["seq"] == step


async def test_a_plans_child_waits_at_its_gate_with_its_templates_answers(tmp_path: Path) -> None:
    # Its plan written at a gate, each child asks a gate of its own (from its file: an
    # uploaded graph may not plan).
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        run_id = (await Engine(store).run(REPO / ".ci" / "fuzz-plan.yaml", {})).run_id
        items = [{"id": "a"}, {"id": "b", "needs": ["a"]}]
        plan = {"interrupt_id": f"{run_id}:phases:plan", "trigger": "planned"}
        assert (await _reply(client, run_id, {**plan, "data": {"plan": items}}))[0] == 200
        view = await wait_for(client, run_id, lambda v: "phases.a" in v["nodes"])
        view = await wait_for(client, run_id, lambda v: v["status"] == "waiting")
        (gate,) = view["interrupts"]
        assert (gate["node"], gate["answers"]) == ("phases.a", ["ok", "fail"])

        status, _ = await _reply(client, run_id, {"interrupt_id": gate["id"], "trigger": "ok"})
        assert status == 200
        view = await wait_for(
            client, run_id, lambda v: v["nodes"]["phases.a"]["status"] != "waiting"
        )
        view = await wait_for(client, run_id, lambda v: v["status"] == "waiting")
        assert [(i["node"], i["answers"]) for i in view["interrupts"]] == [
            ("phases.b", ["ok", "fail"])
        ]
