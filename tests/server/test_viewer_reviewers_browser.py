"""The viewer offers a gate's buttons only to its reviewers, and shows who answered.

A real ``phasegraph serve`` with a token file, and Debian's Chromium through Playwright
(skipped without them, as the other viewer tests): bob may answer gates but is not among
the gate's reviewers, so its buttons are disabled with the reason; alice is, answers it,
and the timeline says she confirmed it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_viewer_browser import VIEWER, Served, serving

from browser_kit import browser, shot, signed_in
from phasegraph.server._tokens import load_book, save_book

__all__ = ["browser"]  # the module's browser fixture, shared

REVIEWED = VIEWER.replace(
    '        human: spec_review\n        payload: {spec: "{spec}"}\n',
    '        human: spec_review\n        payload: {spec: "{spec}"}\n'
    '        reviewers: [alice, "group:release"]\n',
)
REASON = "only alice or members of release may answer this gate"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str, str]]:
    assert REVIEWED != VIEWER
    folder = tmp_path_factory.mktemp("viewer-reviewers")
    tokens = folder / "tokens.json"
    scopes = ("runs:read", "gates:answer")
    book, bob = load_book(tokens).add("bob", scopes, ("qa",), now=0.0)
    book, alice = book.add("alice", scopes, ("qa",), now=0.0)
    save_book(tokens, book)
    with serving(folder, "--tokens", str(tokens)) as served:
        yield served, bob, alice


def test_only_a_reviewer_may_press_a_gates_buttons(
    browser: Any, team: tuple[Served, str, str]
) -> None:
    served, bob, alice = team
    body = {"graph_yaml": REVIEWED, "input": {"topic": "reviewers", "loops": 0}}
    run_id = served.call("POST", "/runs", body)["run_id"]
    served.wait_for(run_id, "waiting")

    with signed_in(browser, served.url, bob) as tab:
        tab.goto(f"{served.url}/ui#/runs/{run_id}")
        gate = tab.locator(".gate")
        gate.wait_for()
        assert gate.locator(".reviewers").inner_text() == "Reviewers: alice, group:release"
        triggers = gate.locator("button.trigger")
        assert triggers.count() == 2
        assert all(triggers.nth(i).is_disabled() for i in range(2))
        assert triggers.first.get_attribute("title") == REASON
        assert gate.locator(".not-a-reviewer").inner_text() == REASON
        assert gate.locator("textarea, input").first.is_disabled()
        shot(tab, "gate-not-a-reviewer.png")

    with signed_in(browser, served.url, alice) as tab:
        tab.goto(f"{served.url}/ui#/runs/{run_id}")
        gate = tab.locator(".gate")
        gate.wait_for()
        assert gate.locator(".needs-scope").count() == 0
        confirm = gate.locator("button.trigger", has_text="confirm")
        assert not confirm.is_disabled()
        confirm.click()
        tab.locator(".actor", has_text="confirmed by alice").wait_for()
        shot(tab, "gate-confirmed-by-reviewer.png")
    served.wait_for(run_id, "completed")
    records = served.call("GET", f"/runs/{run_id}/history")["records"]
    (answer,) = [r for r in records if r["kind"] == "reply"]
    assert answer["actor"] == {"name": "alice", "groups": ["qa"]}
