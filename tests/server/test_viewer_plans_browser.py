"""Plans made at run time in the viewer: a plan's children, live, in their parent's box.

A real ``phasegraph serve`` and Debian's Chromium through Playwright, as the other viewer
tests (skipped without them, except under ``CI=true``). The run's plan is written by the
test at the plan's gate (``tests/fixtures/server/planned.yaml``), so the run waits between
plans for as long as the page needs: no step happens until the test answers.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_server import FIXTURES
from test_viewer_browser import TOKEN, Served, serving

from browser_kit import browser, shot, signed_in
from builders import REPO, cli_argv

__all__ = ["browser"]  # the module's browser fixture, shared

RUN_ID = "viewer-plans"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("viewer-plans")) as server:
        yield server


def _waiting_for_its_plan(served: Served, graph: Path, run_id: str = RUN_ID) -> None:
    """A run of ``graph`` in the server's store, waiting at its plan's gate.

    Started from its file on the command line: an uploaded graph may not plan.
    """
    argv = cli_argv("run", str(graph), "--run-id", run_id, "--store", served.store, "-q")
    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}  # the children's actions
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr  # waiting


def _plan(served: Served, items: list[dict[str, Any]], run_id: str = RUN_ID) -> None:
    """Answer the plan's gate with ``items``: the server then drives the run on."""
    body = {
        "interrupt_id": f"{run_id}:phases:plan",
        "trigger": "planned",
        "data": {"plan": items},
    }
    served.call("POST", f"/runs/{run_id}/reply", body)


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def test_a_plans_children_appear_live_in_their_parents_box(browser: Any, served: Served) -> None:
    _waiting_for_its_plan(served, FIXTURES / "planned.yaml")
    with signed_in(browser, served.url, TOKEN, height=900) as page:
        page.goto(f"{served.url}/ui#/runs/{RUN_ID}")
        page.locator(".live.is-live").wait_for()  # following the run's events
        page.evaluate("window.notReloaded = true")
        assert page.locator("g.plan").count() == 0  # no plan yet, no children
        page.locator("g.node[data-node='phases']").click()
        panel = page.locator("section[aria-label='Node']")
        panel.locator("text=No plan yet.").wait_for()

        # A plan with a cycle is refused: the feedback its planner gets is shown.
        _plan(served, [{"id": "x", "needs": ["y"]}, {"id": "y", "needs": ["x"]}])
        refused = panel.locator("tr.plan-refused")
        refused.wait_for()
        assert "items 'x' -> 'y' -> 'x' form a cycle" in refused.inner_text()
        assert page.locator("g.plan").count() == 0

        # The first version: its children appear in a box captioned with their parent.
        served.wait_for(RUN_ID, "waiting")  # back at the gate
        _plan(served, [{"id": "a"}, {"id": "b", "needs": ["a"]}, {"id": "bad", "fail": True}])
        box = page.locator("g.plan[data-plan='phases']")
        box.wait_for()
        page.locator("g.node.st-failed[data-node='phases.bad']").wait_for()
        first = panel.locator("tr.plan-version[data-version='1']")
        first.locator("text=failed at step").wait_for()  # the failed child ends version 1
        assert "new: a, b, bad" in first.inner_text()
        assert box.locator(".plan-label").text_content() == "phases · plan v1 · 3 children"
        grouped = page.locator("g.plan-members[data-plan='phases'] > g.node")
        assert grouped.evaluate_all("gs => gs.map(g => g.dataset.node)") == [
            "phases.a",
            "phases.bad",
            "phases.b",
        ]
        frame = box.locator("rect").bounding_box()
        for node in ("phases", "phases.a", "phases.b", "phases.bad"):
            assert _inside(page.locator(f"g.node[data-node='{node}']").bounding_box(), frame)
        assert not _inside(page.locator("g.node[data-node='report']").bounding_box(), frame)
        shot(page, "plans-first-version.png")

        # A child is a node like any other: from the keyboard, its panel, result and steps.
        page.locator("g.node[data-node='phases.b']").focus()
        page.keyboard.press("Enter")
        panel.locator("h2:has-text('Node phases.b')").wait_for()
        assert panel.locator(".child-result").inner_text() == '"b done"'
        assert panel.locator("dd .badge").first.inner_text() == "completed"
        panel.locator("button:text-is('list its steps')").click()
        listed = page.locator("table.steps tbody tr").evaluate_all(
            "trs => trs.filter(tr => !tr.hidden).map(tr => tr.dataset.node)"
        )
        assert listed == ["phases.b", "phases.b"]  # its start, and its action's trigger
        shot(page, "plans-child.png")
        page.select_option("#step-node", "")

        # A revision: the new children appear while the page watches, the failed one fades.
        assert page.locator("g.node[data-node='phases.fix']").count() == 0
        served.wait_for(RUN_ID, "waiting")
        _plan(served, [{"id": "fix"}, {"id": "c", "needs": ["fix"]}])
        page.locator("g.plan-members[data-plan='phases'] g.node[data-node='phases.fix']").wait_for()
        page.locator("h1 .badge.st-completed").wait_for()
        caption = "phases · plan v2 · 4 children, 1 superseded"
        box.locator(f".plan-label:text-is('{caption}')").wait_for()
        faded = page.locator("g.node[data-node='phases.bad']").get_attribute("class") or ""
        assert "superseded" in faded
        assert page.evaluate("window.notReloaded") is True

        # The parent's plan versions, in order, and each child one click away.
        panel.locator("dd button:text-is('phases')").click()  # "plan of" on the child's panel
        panel.locator("h2:has-text('Node phases')").wait_for()
        second = panel.locator("tr.plan-version[data-version='2']")
        second.locator("text=done at step").wait_for()
        rows = panel.locator("table.plans tbody tr")
        assert rows.evaluate_all("trs => trs.map(tr => tr.className)") == [
            "plan-refused",
            "plan-version",
            "plan-version",
        ]
        assert "4 children" in second.inner_text()
        assert "new: fix, c · kept: a, b · dropped: bad" in second.inner_text()
        assert "Plan version 2: 4 children now." in panel.inner_text()
        shot(page, "plans-replanned.png")
        committed = second.locator("td.num").inner_text()  # the step of version 2
        second.locator("button[data-child='phases.fix']").click()
        panel.locator("h2:has-text('Node phases.fix')").wait_for()
        assert panel.locator(".child-result").inner_text() == '"fix done"'
        # The step that committed version 2 shows the whole plan.
        page.click(f"tr[data-seq='{committed}'] button.seq")
        page.locator("h3:text-is('Plan version 2 committed')").wait_for()


def test_a_childs_gate_is_answered_from_its_card(browser: Any, served: Served) -> None:
    # Each child of this plan asks a gate of its own (the graph .ci/fuzz plans with).
    run_id = "viewer-plan-gates"
    _waiting_for_its_plan(served, REPO / ".ci" / "fuzz-plan.yaml", run_id)
    _plan(served, [{"id": "a"}, {"id": "b", "needs": ["a"]}], run_id)
    served.wait_for(run_id, "waiting")  # at child a's gate
    with signed_in(browser, served.url, TOKEN) as page:
        page.goto(f"{served.url}/ui#/runs/{run_id}")
        gate = page.locator(".gate:has(strong:text-is('phases.a'))")
        gate.wait_for()
        assert gate.locator("button.trigger").all_inner_texts() == ["ok", "fail"]
        gate.locator("button.trigger", has_text="ok").click()
        # Child a completes; child b, which needs it, asks next.
        page.locator(".gate:has(strong:text-is('phases.b'))").wait_for()
        page.locator("g.node.st-completed[data-node='phases.a']").wait_for()
        assert "st-waiting" in (
            page.locator("g.node[data-node='phases.b']").get_attribute("class") or ""
        )
