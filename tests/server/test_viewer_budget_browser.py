"""The run's budget in the viewer, in a real Chromium over a real ``phasegraph serve``.

A run of an offline agent under a budget (the graph of ``docs/budgets.md``) stops at its
budget gate; the page shows the budget left in the run's header, what the node spent,
and what each model turn spent, in tokens and money.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from test_viewer_browser import TOKEN, serving

from browser_kit import browser, shot, signed_in
from builders import REPO, cli_argv

__all__ = ["browser"]  # the module's Chromium

PAGE = (REPO / "docs" / "budgets.md").read_text(encoding="utf-8")


def _file(name: str) -> str:
    """A file the budgets page writes (``<!-- file: NAME -->`` above its block)."""
    found = re.search(rf"<!-- file: {re.escape(name)} -->\n```\w*\n(.*?)```", PAGE, re.S)
    assert found, name
    return found[1]


def test_the_viewer_shows_the_budget_left_and_spend_per_node_and_turn(
    browser: Any, tmp_path: Path
) -> None:
    for name in ("answers.json", "budgeted.yaml"):
        (tmp_path / name).write_text(_file(name), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    ran = subprocess.run(
        cli_argv("run", "budgeted.yaml", "--run-id", "spend", "--input", "task=x", "--json"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PHASEGRAPH_STORE": store},
    )
    assert ran.returncode == 3, ran.stderr  # waiting at the budget gate
    assert json.loads(ran.stdout)["budget"]["left"]["tokens"] == 500

    with serving(tmp_path) as served, signed_in(browser, served.url, TOKEN) as page:
        view = served.call("GET", "/runs/spend")
        assert view["budget"]["spent"] == {"tokens": 4500, "money": 0.00135}
        page.goto(f"{served.url}/ui#/runs/spend")
        header = page.locator(".budget")
        header.wait_for()
        assert header.inner_text() == (
            "budget: 4500 tokens spent, 500 left of 5000; 0.00135 money spent, 0.49865 left of 0.5"
        )
        page.locator("g.node[data-node='look']").click()
        page.get_by_role("heading", name="Node look", exact=True).wait_for()
        assert page.locator(".node-spend").inner_text() == "4500 tokens · 0.00135 money"
        facts = page.locator(".conversation .msg.role-assistant .turn-facts")
        facts.first.wait_for()
        turns = facts.all_inner_texts()
        assert len(turns) == 3
        assert all("spent 1500 tokens · 0.00045 money" in turn for turn in turns), turns
        shot(page, "budget-viewer.png")

        # The gate asks for more: the page sends what a person types; the run goes on.
        gate = page.locator(".gate.budget-gate")
        assert "look" in gate.locator(".facts").inner_text()
        gate.locator("button[data-answer='more']").click()
        assert "nothing was sent" in gate.locator(".message").inner_text()
        gate.locator("input[id^='more-tokens']").fill("2000")
        gate.locator("button[data-answer='more']").click()
        page.locator("h1 .badge.st-completed").wait_for(timeout=60_000)
        reply = next(
            r
            for r in served.call("GET", "/runs/spend/history?limit=100")["records"]
            if r["kind"] == "reply"
        )
        assert reply["result"]["payload"] == {"tokens": 2000}
        assert "left of 7000" in page.locator(".budget").inner_text()
