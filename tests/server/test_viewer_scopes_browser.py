"""The viewer shows what a principal's scopes allow, and says why a control is disabled.

A real ``phasegraph serve`` with the operator's token and a token file, and Debian's
Chromium through Playwright (skipped without them, as the other viewer tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_viewer_browser import TOKEN, Served, serving

from browser_kit import browser, shot, signed_in
from phasegraph.server._tokens import load_book, save_book

__all__ = ["browser"]  # the module's browser fixture, shared


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    folder = tmp_path_factory.mktemp("viewer-scopes")
    tokens = folder / "tokens.json"
    book, reader = load_book(tokens).add("rita", ("runs:read",), ("qa",), now=0.0)
    save_book(tokens, book)
    with serving(folder, "--tokens", str(tokens)) as served:
        yield served, reader


def test_a_reader_sees_disabled_controls_with_their_reasons(
    browser: Any, team: tuple[Served, str]
) -> None:
    served, reader = team
    run_id = served.start(loops=0)
    served.wait_for(run_id, "waiting")
    with signed_in(browser, served.url, reader) as tab:
        assert tab.locator("#whoami").inner_text() == "signed in as rita"
        start = tab.locator("form.start")
        assert start.locator("button").is_disabled()
        assert start.locator(".needs-scope").inner_text() == "starting runs needs runs:start"

        tab.goto(f"{served.url}/ui#/runs/{run_id}")
        gate = tab.locator(".gate")
        gate.wait_for()
        triggers = gate.locator("button.trigger")
        assert triggers.count() == 2
        assert all(triggers.nth(i).is_disabled() for i in range(2))
        assert gate.locator(".needs-scope").inner_text() == "answering gates needs gates:answer"
        assert triggers.first.get_attribute("title") == "answering gates needs gates:answer"
        cancel = tab.locator(".actions button", has_text="Cancel run")
        assert cancel.is_disabled()
        reasons = tab.locator(".actions .needs-scope").all_inner_texts()
        assert "cancelling runs needs runs:cancel" in reasons
        assert "forking runs needs runs:fork" in reasons
        shot(tab, "run-read-only.png")
    assert served.call("GET", f"/runs/{run_id}")["status"] == "waiting"


def test_the_operator_sees_every_control_enabled(browser: Any, team: tuple[Served, str]) -> None:
    served, _ = team
    run_id = served.start(loops=0)
    served.wait_for(run_id, "waiting")
    with signed_in(browser, served.url, TOKEN) as tab:
        assert not tab.locator("form.start button").is_disabled()
        tab.goto(f"{served.url}/ui#/runs/{run_id}")
        tab.locator(".gate").wait_for()
        assert not tab.locator(".gate button.trigger").first.is_disabled()
        assert tab.locator(".needs-scope").count() == 0
    served.call("POST", f"/runs/{run_id}/cancel", {"reason": "test over"})


def test_whoami_is_what_the_viewer_reads(team: tuple[Served, str], tmp_path: Path) -> None:
    served, _ = team
    me = served.call("GET", "/whoami")
    assert me == {"name": "operator", "groups": [], "scopes": ["admin"], "source": "token"}
