"""Answering an uncertain effect over HTTP: ``POST /runs/ID/reply`` on a real socket.

A run is killed after a ``run_command`` call's effect and before its result was committed
(see ``effects_kit``); the server parks it on the ``outcome_unknown`` gate. A wrong answer
is refused with what to send instead; ``happened`` with a result commits that result as
the call's, and the call never runs again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from effects_kit import EffectsServer, effect_id, effects_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EffectsServer]:
    with effects_server(tmp_path_factory.mktemp("effects-reply")) as served:
        yield served


def test_happened_with_a_result_commits_it_as_the_calls_result(server: EffectsServer) -> None:
    run_id = "http-happened"
    gate = server.park(run_id, "effect:1:before")
    assert gate["answers"] == ["happened", "run_again", "fail"]
    assert gate["payload"]["effect_id"] == effect_id(run_id, 1)
    assert gate["payload"]["tool"] == "run_command"
    assert server.effects()[effect_id(run_id, 1)] == 1  # it did happen, unrecorded

    reply = f"/runs/{run_id}/reply"
    wrong = {"interrupt_id": gate["id"], "trigger": "happened", "payload": {"result": [0]}}
    status, refused = server.call("POST", reply, wrong)
    assert status == 409
    assert "happened takes the call's result as a JSON object" in refused["detail"]
    # Quoting the step that opened the gate (as the viewer does) changes nothing: the
    # refusal is about the payload, not a reply to a gate the run has moved past.
    status, refused = server.call("POST", reply, {**wrong, "step": gate["seq"]})
    assert status == 409
    assert "happened takes the call's result as a JSON object" in refused["detail"]
    status, refused = server.call("POST", reply, {"interrupt_id": gate["id"], "trigger": "maybe"})
    assert status == 409
    assert "answer happened, run_again, fail, not 'maybe'" in refused["detail"]

    result = {"exit": 0, "stdout": "counted by hand\n"}
    answer = {"interrupt_id": gate["id"], "trigger": "happened", "payload": {"result": result}}
    status, view = server.call("POST", reply, answer)
    assert status == 200, view
    server.wait_for(run_id, "completed")

    history = server.history(run_id)
    [answered] = [r for r in history if r["kind"] == "reply"]
    assert answered["trigger"] == "happened"
    assert answered["result"]["payload"] == {"result": result}
    committed = {e["id"]: e["result"] for e in answered["nodes"]["agent"]["ledger"]}
    assert committed[effect_id(run_id, 1)] == result
    messages = [m for r in history for m in r["appended"].get("conversation", [])]
    tool_results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert tool_results[1] == result  # what the model reads as the call's result
    assert server.effects()[effect_id(run_id, 1)] == 1  # not run again
    assert server.effects()[effect_id(run_id, 0)] == 1
    assert [r["kind"] for r in history].count("wait") == 1
    status, replayed = server.call("POST", f"/runs/{run_id}/replay")
    assert status == 200, replayed
    assert replayed["identical"], replayed["divergence"]  # the answer replays as recorded
