"""Uncertain effects in the run viewer, in a real Chromium over a real ``phasegraph serve``.

Each run is killed at a point of a ``run_command`` call's timeline and parked by the
server on its ``outcome_unknown`` gate (see ``effects_kit``; no timing). The page shows
the question, the call and three labelled answers; what a person types there is what the
history records, and the file the calls append to counts what really ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from effects_kit import TOKEN, EffectsServer, effect_id, effects_server

from browser_kit import browser, signed_in

__all__ = ["browser"]  # the module's Chromium, shared with the viewer's tests
DONE_MS = 120_000  # a failure guard for what the server does next, on a machine under load


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EffectsServer]:
    with effects_server(tmp_path_factory.mktemp("effects-viewer")) as served:
        yield served


@pytest.fixture
def page(browser: Any, server: EffectsServer) -> Iterator[Any]:
    """A tab that gave the token; every POST it sends to a ``/reply`` route is kept."""
    with signed_in(browser, server.url, TOKEN, height=1000) as tab:
        tab.replies = []
        tab.on(
            "request",
            lambda r: tab.replies.append(r.post_data) if r.url.endswith("/reply") else None,
        )
        yield tab


def shot(tab: Any, folder: Path, name: str) -> Path:
    path = folder / name
    tab.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def open_gate(page: Any, server: EffectsServer, run_id: str) -> Any:
    page.goto(f"{server.url}/ui#/runs/{run_id}")
    gate = page.locator(".gate.effect-gate")
    gate.wait_for(timeout=DONE_MS)
    return gate


def test_it_happened_commits_the_result_typed_in_the_page(
    page: Any, server: EffectsServer, tmp_path: Path
) -> None:
    run_id = "page-happened"
    server.park(run_id, "effect:1:before")  # call 1 ran; its result was never committed
    gate = open_gate(page, server, run_id)
    assert "run_command" in gate.locator(".question").inner_text()
    assert "is unknown" in gate.locator(".question").inner_text()
    facts = gate.locator("dl.facts").inner_text()
    assert "run_command #1" in facts
    assert effect_id(run_id, 1) in facts
    assert "once" in facts
    assert str(server.effects_file) in gate.locator("pre.json").inner_text()  # the arguments
    labels = gate.locator("button.trigger").all_inner_texts()
    assert labels == ["It happened", "Run it again", "Fail"]
    # The node's ledger: call 0 committed, call 1 an intent whose outcome is unknown.
    entry = page.locator("table.ledger tr[data-effect]")
    snapshot = server.get(f"/runs/{run_id}/snapshot")  # the engine's own fold of the steps
    in_flight = [e["id"] for e in snapshot["nodes"]["agent"]["ledger"]]
    assert [entry.nth(i).get_attribute("data-effect") for i in range(entry.count())] == in_flight
    assert "result committed" in entry.nth(0).inner_text()
    assert "outcome unknown" in entry.nth(1).inner_text()
    assert entry.nth(1).get_attribute("data-effect") == effect_id(run_id, 1)
    # The conversation has no tool message yet: each call says what its ledger holds.
    calls = page.locator(".conversation .tool-call[data-tool='run_command']")
    assert f"result committed (effect {effect_id(run_id, 0)})" in calls.nth(0).inner_text()
    assert f"intent committed (effect {effect_id(run_id, 1)})" in calls.nth(1).inner_text()
    steps = page.locator("table.steps tbody").inner_text()
    assert f"intent · run_command #0 · id {effect_id(run_id, 0)}" in steps
    assert "result · run_command #0" in steps
    assert "outcome unknown · run_command #1 · asked" in steps
    shot(page, tmp_path, "effect-gate.png")
    page.click("tr:has-text('intent · run_command #1') button.seq")  # the step's detail
    detail = page.locator("section[aria-label='Step'] pre.json").first
    assert json.loads(detail.inner_text())["id"] == effect_id(run_id, 1)

    happened = gate.locator("button[data-answer='happened']")
    gate.locator("textarea").fill('{"exit": 0, "stdout": ')
    happened.click()
    assert "is not JSON" in gate.locator(".message.error").inner_text()
    assert page.replies == []  # refused in the page: nothing was sent

    gate.locator("textarea").fill("[0]")  # JSON, but not what happened takes
    happened.click()
    refusal = gate.locator(".message.error", has_text="as a JSON object")
    refusal.wait_for(timeout=DONE_MS)
    assert "happened takes the call's result" in refusal.inner_text()
    shot(page, tmp_path, "effect-gate-refused.png")

    result = {"exit": 0, "stdout": "typed in the page"}
    gate.locator("textarea").fill(json.dumps(result))
    happened.click()
    page.locator("h1 .badge.st-completed").wait_for(timeout=DONE_MS)
    history = server.history(run_id)
    [opened] = [
        r
        for r in history
        if r["interrupts"] and f"{effect_id(run_id, 1)}:outcome" in r["interrupts"]
    ]
    assert [json.loads(sent) for sent in page.replies][-1] == {
        "interrupt_id": f"{effect_id(run_id, 1)}:outcome",
        "trigger": "happened",
        "payload": {"result": result},
        "step": opened["seq"],  # the page quotes the step that opened the gate
    }
    [reply] = [r for r in history if r["kind"] == "reply"]
    assert reply["result"]["payload"] == {"result": result}
    messages = [m for r in history for m in r["appended"].get("conversation", [])]
    assert [json.loads(m["content"]) for m in messages if m["role"] == "tool"][1] == result
    assert server.effects()[effect_id(run_id, 1)] == 1  # not run again
    answered = f"answered happened · id {effect_id(run_id, 1)}"
    page.locator("table.steps tbody", has_text=answered).wait_for(timeout=DONE_MS)
    shot(page, tmp_path, "effect-answered.png")


def test_run_it_again_runs_the_call_once_more(
    page: Any, server: EffectsServer, tmp_path: Path
) -> None:
    run_id = "page-again"
    server.park(run_id, "intent:1:after")  # call 1's intent committed; it never ran
    assert server.effects()[effect_id(run_id, 1)] == 0
    gate = open_gate(page, server, run_id)
    page.set_viewport_size({"width": 420, "height": 900})  # a phone: nothing spills sideways
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, tmp_path, "effect-gate-narrow.png")
    gate.locator("button[data-answer='run_again']").click()
    page.locator("h1 .badge.st-completed").wait_for(timeout=DONE_MS)
    assert server.effects()[effect_id(run_id, 1)] == 1  # ran, with the same effect id
    assert server.effects()[effect_id(run_id, 0)] == 1
    [reply] = [r for r in server.history(run_id) if r["kind"] == "reply"]
    assert reply["trigger"] == "run_again"


def test_fail_fails_the_step_with_the_reason_given(page: Any, server: EffectsServer) -> None:
    run_id = "page-fail"
    server.park(run_id, "intent:1:after")
    gate = open_gate(page, server, run_id)
    gate.locator("input[id^='fail-reason']").fill("the receiver was down")
    gate.locator("button[data-answer='fail']").click()
    page.locator("h1 .badge.st-failed").wait_for(timeout=DONE_MS)
    # Failed as its action would have: the agent machine's error trigger, logged.
    assert server.get(f"/runs/{run_id}")["nodes"]["agent"]["path"] == ["errored"]
    error = server.get(f"/runs/{run_id}/errors")["errors"][0]["message"]
    assert "answered fail: the receiver was down" in error
    assert effect_id(run_id, 1) in error
    assert server.effects()[effect_id(run_id, 1)] == 0


def test_it_happened_for_an_actions_own_effect_takes_the_trigger_it_returned(
    page: Any, server: EffectsServer, tmp_path: Path
) -> None:
    run_id = "page-action"
    server.park_action(run_id)  # the shell action's effect happened; its step never committed
    gate = open_gate(page, server, run_id)
    assert "the action's own effect" in gate.locator("dl.facts").inner_text()
    assert f"{run_id}:pay:0" in gate.locator("dl.facts").inner_text()
    offered = gate.locator("datalist option")
    assert [offered.nth(i).get_attribute("value") for i in range(offered.count())] == [
        "ok",
        "fail",
    ]  # the triggers the node's state takes
    happened = gate.locator("button[data-answer='happened']")
    happened.click()
    assert "Name the trigger" in gate.locator(".message.error").inner_text()
    assert page.replies == []  # refused in the page: nothing was sent
    shot(page, tmp_path, "effect-gate-action.png")

    gate.locator("input[list]").fill("ok")
    happened.click()
    page.locator("h1 .badge.st-completed").wait_for(timeout=DONE_MS)
    [reply] = [r for r in server.history(run_id) if r["kind"] == "reply"]
    assert (reply["trigger"], reply["dest"]) == ("ok", ["done"])  # fired as if returned
    assert reply["events"][0]["payload"] == {"trigger": "ok"}
    assert server.effects()[f"{run_id}:pay:0"] == 1  # not run again


def test_a_gate_of_a_run_whose_graph_file_changed_is_answered_on_the_page(
    page: Any, server: EffectsServer, tmp_path: Path
) -> None:
    run_id = "page-changed"
    graph = tmp_path / "changed.yaml"
    graph.write_text(server.graph.read_text(encoding="utf-8"), encoding="utf-8")
    server.park(run_id, "effect:1:before", graph)
    changed = json.loads(graph.read_text(encoding="utf-8")) | {"description": "changed"}
    graph.write_text(json.dumps(changed), encoding="utf-8")
    gate = open_gate(page, server, run_id)
    result = {"exit": 0, "stdout": "it's done"}
    gate.locator("textarea").fill(json.dumps(result))
    gate.locator("button[data-answer='happened']").click()
    # The server drives the run with the definition it stored: the edit is no obstacle.
    server.wait_for(run_id, "completed")
    [reply] = [r for r in server.history(run_id) if r["kind"] == "reply"]
    assert reply["result"]["payload"] == {"result": result}
    assert server.effects()[effect_id(run_id, 1)] == 1


def test_a_cancelled_gate_is_closed_by_a_step_named_cancel(
    page: Any, server: EffectsServer
) -> None:
    run_id = "page-cancel"
    server.park(run_id, "intent:1:after")
    open_gate(page, server, run_id)
    page.click("text=Cancel run…")
    page.fill("#cancel-reason", "nobody can tell")
    page.click("button:text-is('Cancel the run')")
    page.locator("h1 .badge.st-cancelled").wait_for(timeout=DONE_MS)
    assert page.locator(".gate").count() == 0
    last = page.locator("table.steps tbody tr").last
    # The step says what it did and who asked: the operator whose token the page holds.
    assert last.locator("td").nth(3).inner_text().startswith("cancel · cancelled by operator at ")
    assert server.effects()[effect_id(run_id, 1)] == 0
