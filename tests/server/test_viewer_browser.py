"""The run viewer in a real browser: the system's headless Chromium driven by Playwright.

One ``phasegraph serve`` (the real command, in a subprocess, with a token and a SQLite
store) and one browser serve the whole module. The page is used as a person would: type
the token, read the runs list, open a run, watch steps arrive, click a gate's trigger.
Screenshots land in ``build/screenshots/`` (kept by CI). Without Chromium or Playwright
these tests skip, except under ``CI=true``, where they fail: CI installs both.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from test_gate_files import NOTES, gated_folder, serve_in
from test_gate_files import TOKEN as FILES_TOKEN
from test_server import FIXTURES

from browser_kit import WAIT_MS, browser, shot, signed_in
from builders import REPO, cli_argv
from phasegraph import Engine, open_store

T = TypeVar("T")
__all__ = ["WAIT_MS", "browser", "shot", "signed_in"]  # shared by the module's tests
TOKEN = "viewer-token"
VIEWER = (FIXTURES / "viewer.yaml").read_text(encoding="utf-8")


@dataclass
class Served:
    """The server under test: its URL and a small client for setting up runs."""

    url: str
    store: str

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def start(self, **run_input: Any) -> str:
        body = {"graph_yaml": VIEWER, "input": {"topic": "viewer", **run_input}}
        run_id: str = self.call("POST", "/runs", body)["run_id"]
        return run_id

    def wait_for(self, run_id: str, status: str) -> dict[str, Any]:
        # Polls the server; the bound is a failure guard for a stuck run, not a speed limit.
        for _ in range(3000):
            view: dict[str, Any] = self.call("GET", f"/runs/{run_id}")
            if view["status"] == status:
                return view
            time.sleep(0.01)
        raise AssertionError(f"run {run_id} never reached {status}")


@contextmanager
def serving(folder: Path, *options: str) -> Iterator[Served]:
    """``phasegraph serve`` on a free port with the viewer's token and a SQLite store in
    ``folder``, and ``options`` (more sign-in, say); stopped on leaving."""
    store = f"sqlite:///{folder / 'runs.db'}"
    argv = cli_argv(
        "serve",
        "--port",
        "0",
        "--token",
        TOKEN,
        "--store",
        store,
        "--upload-dir",
        str(folder / "uploads"),
        "--allow-python",
        "gate_actions",
        "--allow-python",
        "phasegraph.concerns.spec",
        *options,
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")])),
    }
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"http://\S+", line)
        assert match, (
            f"serve printed {line!r}; stderr: {server.stderr.read() if server.stderr else ''}"
        )
        try:
            yield Served(match[0], store)
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("viewer")) as server:
        yield server


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    """A fresh tab at 1280 by 800 that has given the token."""
    with signed_in(browser, served.url, TOKEN) as tab:
        yield tab


def test_a_missing_or_wrong_token_is_said_plainly(browser: Any, served: Served) -> None:
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    try:
        tab.goto(served.url + "/ui")
        tab.wait_for_selector("text=This server needs a token.")
        tab.fill("#token", "wrong")
        tab.keyboard.press("Enter")  # the form works from the keyboard
        tab.wait_for_selector("text=The server refused this token: check it and try again.")
        assert tab.locator("table.runs").count() == 0
    finally:
        context.close()


def test_the_list_shows_runs_and_waiting_runs_stand_out(page: Any, served: Served) -> None:
    waiting = served.start(loops=0)
    served.wait_for(waiting, "waiting")
    done = served.call("POST", "/runs", {"graph": "hello", "input": {"who": "list"}})["run_id"]
    served.wait_for(done, "completed")

    page.reload()  # the list also refreshes itself every few seconds; no need to wait
    row = page.locator(f"tr:has(a:text-is('{waiting}'))")
    row.wait_for()
    assert "attention" in (row.get_attribute("class") or "")
    assert row.locator(".badge").inner_text() == "waiting"
    assert page.locator(f"tr:has(a:text-is('{done}')) .badge").inner_text() == "completed"
    assert "waiting for an answer" in page.locator(".attention-banner").inner_text()
    shot(page, "runs-list.png")

    page.select_option("#f-graph", "hello")  # filters the runs loaded
    page.locator(f"a:text-is('{waiting}')").wait_for(state="detached")
    assert page.locator(f"a:text-is('{done}')").count() == 1
    page.select_option("#f-status", "waiting")  # asks the server for waiting runs only
    page.locator("text=No run of this graph among those loaded.").wait_for()
    page.select_option("#f-graph", "")
    page.locator(f"a:text-is('{waiting}')").wait_for()
    assert page.locator(f"a:text-is('{done}')").count() == 0


def test_committed_steps_appear_without_a_reload(page: Any, served: Served) -> None:
    # The loops step every 50 ms while the gate holds the run open: it stays `running`, so
    # only the event stream can bring the page its new steps.
    run_id = served.start(loops=5000, delay=0.05)
    served.wait_for(run_id, "running")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    page.locator(".gate").wait_for()
    page.evaluate("window.notReloaded = true")
    shown = int(page.locator("table.steps tbody tr").last.get_attribute("data-seq"))
    page.locator(f"tr[data-seq='{shown + 3}']").wait_for()
    assert page.evaluate("window.notReloaded") is True
    assert page.locator("h1 .badge").inner_text() == "running"
    assert page.locator(".live").inner_text() == "\N{BLACK CIRCLE} live"
    page.locator("g.node.st-running[data-node='a']").wait_for()
    assert "st-waiting" in (page.locator("g.node[data-node='spec']").get_attribute("class") or "")
    shot(page, "run-running-dag.png")

    # The keyboard reaches a step; Enter opens its detail and the snapshot at that seq.
    page.focus(f"tr[data-seq='{shown}'] button.seq")
    page.keyboard.press("Enter")
    page.locator(f"h2:text-is('Step {shown}')").wait_for()
    page.locator(f"text=As step {shown} left it").wait_for()  # the node's machine then
    page.locator(f"summary:text-is('Snapshot at step {shown}')").wait_for()

    served.call("POST", f"/runs/{run_id}/cancel", {"reason": "test over"})
    page.locator("h1 .badge.st-cancelled").wait_for()


def test_a_gate_answered_with_a_click_lets_the_run_complete(page: Any, served: Served) -> None:
    run_id = served.start(loops=3)
    served.wait_for(run_id, "waiting")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    gate = page.locator(".gate")
    gate.wait_for()
    assert "spec for viewer" in gate.locator("pre").inner_text()  # the payload is shown
    triggers = gate.locator("button.trigger").all_inner_texts()
    assert triggers == ["confirm", "reject"]  # the gate's own triggers
    assert "st-pending" in (page.locator("g.node[data-node='build']").get_attribute("class") or "")
    shot(page, "run-waiting-gate.png")

    gate.locator("textarea").fill("looks right")
    gate.locator("button.trigger", has_text="confirm").click()
    page.locator("h1 .badge.st-completed").wait_for()
    page.locator(".live.is-ended").wait_for()  # the stream ended with the run
    for node in ("spec", "a", "b", "build", "total"):
        assert "st-completed" in (
            page.locator(f"g.node[data-node='{node}']").get_attribute("class") or ""
        )
    record = served.call("GET", f"/runs/{run_id}/history?limit=1000")["records"]
    reply = next(r for r in record if r["kind"] == "reply")
    assert reply["result"]["payload"] == {"feedback": "looks right"}
    shot(page, "run-completed.png")

    # A narrow window: nothing spills sideways out of the page.
    page.set_viewport_size({"width": 420, "height": 800})
    page.locator("g.node[data-node='b']").focus()
    page.keyboard.press("Enter")
    page.locator("h2:has-text('Node b')").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "run-narrow.png")


def test_replay_and_fork_from_a_step_with_a_data_patch(page: Any, served: Served) -> None:
    run_id = served.call("POST", "/runs", {"graph": "hello", "input": {"who": "ada"}})["run_id"]
    served.wait_for(run_id, "completed")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    page.click("text=Replay this run")
    page.locator("text=Identical: replay reproduced all").wait_for()

    page.click("tr[data-seq='2'] button.seq")
    page.fill("#fork-patch", '{"who": "bob"')
    page.click("form.fork button[type=submit]")
    page.locator("form.fork .message.error").wait_for()  # not JSON: said so, nothing sent
    page.fill("#fork-patch", '{"who": "bob"}')
    page.click("form.fork button[type=submit]")
    page.locator(f"text=forked from {run_id} at step 2").wait_for()
    forked = page.evaluate("decodeURIComponent(location.hash.split('/').pop())")
    snapshot = served.call("GET", f"/runs/{forked}/snapshot?seq=0")
    assert snapshot["data"]["who"] == "bob"
    assert forked != run_id


def _in_thread(work: Coroutine[Any, Any, T]) -> T:
    # Playwright's sync API runs an event loop in this thread: run the work in another.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work).result()


def _created_not_driven(store: str, graph: str) -> str:
    """A run of ``graph`` created in the server's store (its first step committed), not driven.

    It waits there for the page's Resume button, so the model's streamed text is sent to a
    page that already follows the run, whatever the machine's speed.
    """

    async def create() -> str:
        async with open_store(store) as opened, Engine(opened).start(graph) as run:
            return run.run_id

    return _in_thread(create())


def test_a_coding_agents_conversation_shows_its_tool_calls(page: Any, served: Served) -> None:
    run_id = served.call("POST", "/runs", {"graph": "coding_task", "input": {}})["run_id"]
    served.wait_for(run_id, "waiting")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    # The deadline fires `timeout`; a reviewer is offered the answers only.
    page.locator(".gate button.trigger").first.wait_for()
    assert page.locator(".gate button.trigger").all_inner_texts() == ["confirm", "reject"]
    page.locator(".gate button.trigger", has_text="confirm").click()
    page.locator("h1 .badge.st-completed").wait_for(timeout=120_000)

    page.locator("g.node[data-node='build']").click()
    talk = page.locator(".conversation .talk[data-key='conversation']")
    talk.wait_for()
    assert "Implement calc.total" in talk.locator(".msg.role-user").first.inner_text()
    listing = talk.locator(".tool-call[data-tool='list_files']").first
    assert "calc.py" in listing.locator(".tool-result pre").text_content()  # matched by call id
    assert "model coder" in talk.locator(".msg.role-assistant .turn-facts").first.inner_text()
    assert "completion tokens" in talk.locator(".msg.role-assistant .turn-facts").first.inner_text()
    refused = talk.locator(".tool-call.refused")
    assert refused.count() == 1
    assert refused.locator(".tool-name").inner_text() == "write_file"
    marker = talk.locator(".marker.phase_violation")
    assert "not allowed in phase 'planning'" in marker.inner_text()
    shot(page, "conversation-coding-task.png")

    # A tool step's detail shows what it appended to the conversation. The refused call
    # was refused before any intent: no step committed it, the tool step says why.
    seq = int(
        refused.locator("xpath=ancestor::div[contains(@class,'msg')]").get_attribute("data-seq")
    )
    records = served.call("GET", f"/runs/{run_id}/history?limit=1000")["records"]
    act = next(r["seq"] for r in records if r["seq"] > seq and r["appended"])
    between = [r["kind"] for r in records if seq <= r["seq"] < act]
    assert "intent" not in between, between
    page.click(f"tr[data-seq='{act}'] button.seq")
    page.locator("h3:text-is('Appended to lists')").wait_for()
    assert "phase_violation" in page.locator("h3:text-is('Appended to lists') + pre").inner_text()

    page.select_option("#step-node", "build")  # one node's steps listed alone
    assert page.locator("table.steps tbody tr[data-node='deliver']").first.is_hidden()
    assert page.locator("table.steps tbody tr[data-node='build']").first.is_visible()


def test_a_finished_agent_run_opens_on_its_conversation_and_links_to_a_step(
    page: Any, served: Served
) -> None:
    run_id = served.call("POST", "/runs", {"graph": "coding_task", "input": {}})["run_id"]
    (gate,) = served.wait_for(run_id, "waiting")["interrupts"]
    served.call("POST", f"/runs/{run_id}/reply", {"interrupt_id": gate["id"], "trigger": "confirm"})
    served.wait_for(run_id, "completed")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    # No click: the finished run opens on the node whose model did the work.
    talk = page.locator(".conversation .talk[data-key='conversation']")
    talk.wait_for()
    assert page.locator(".conversation h2").inner_text() == "Model conversation of build"
    assert page.locator("section[aria-label='Node'] h2").inner_text() == "Node build"
    # The system message the turns sent, rendered, comes first; then the rendered prompt.
    system = talk.locator(".msg.role-system").first
    assert "careful software engineer" in system.locator(".msg-text").inner_text()
    assert talk.locator(".msg").first.get_attribute("class") == "msg role-system"
    prompted = talk.locator(".msg.role-user.prompted").first
    assert "Implement calc.total" in prompted.inner_text()
    assert "the prompt template, rendered" in prompted.inner_text()
    shot(page, "conversation-opened-finished.png")

    # Picking a step puts it in the address; that address, opened anew, opens on the step.
    seq = int(talk.locator(".msg.role-assistant").nth(1).get_attribute("data-seq"))
    page.click(f"tr[data-seq='{seq}'] button.seq")
    page.locator(f"h2:text-is('Step {seq}')").wait_for()
    link = page.locator("a.step-link").get_attribute("href")
    assert link == f"#/runs/{run_id}?node=build&seq={seq}"
    assert page.evaluate("location.hash") == link
    page.goto(f"{served.url}/ui#/")
    page.locator("table.runs").wait_for()
    page.goto(f"{served.url}/ui{link}")
    page.locator(f"h2:text-is('Step {seq}')").wait_for()
    assert page.locator(f"tr[data-seq='{seq}']").get_attribute("class") == "picked"
    assert page.locator(".conversation h2").inner_text() == "Model conversation of build"


def test_streamed_text_arrives_live_and_compressions_show(page: Any, served: Served) -> None:
    run_id = _created_not_driven(served.store, "research_agent")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    page.locator(".live.is-live").wait_for()
    page.locator("g.node[data-node='research']").click()
    # Every text the live box ever shows is kept: the test reads what arrived, not when.
    page.evaluate(
        """() => {
        window.streamed = [];
        const box = document.querySelector('.live-text');
        new MutationObserver(() => window.streamed.push(box.textContent))
          .observe(box, {childList: true, subtree: true, characterData: true});
    }"""
    )
    page.click("button:text-is('Resume')")
    page.locator("h1 .badge.st-completed").wait_for(timeout=120_000)
    streamed = " ".join(page.evaluate("window.streamed"))
    assert "streaming" in streamed
    assert "Let me see which machine files there are." in streamed
    talk = page.locator(".conversation .talk[data-key='conversation']")
    talk.wait_for()
    compression = talk.locator(".msg.compression").first
    assert "summarized" in compression.inner_text()
    compression.locator("summary").click()
    assert "Summary of the earlier conversation" in compression.locator(".msg-text").inner_text()
    assert page.locator(".live-text").is_hidden()  # the committed answers replaced the live text
    shot(page, "conversation-research-agent.png")


def test_a_failed_run_opens_on_its_failed_node(page: Any, served: Served) -> None:
    # The build calls the planner, whose trigger its machine does not know: build fails.
    run_id = served.call(
        "POST",
        "/runs",
        {
            "graph_yaml": VIEWER.replace("gate_actions:build", "gate_actions:plan"),
            "input": {"topic": "x", "loops": 0},
        },
    )["run_id"]
    view = served.wait_for(run_id, "waiting")
    (gate,) = view["interrupts"]
    served.call("POST", f"/runs/{run_id}/reply", {"interrupt_id": gate["id"], "trigger": "confirm"})
    served.wait_for(run_id, "failed")
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    node = page.locator("section[aria-label='Node']")
    node.locator("h2:has-text('Node build')").wait_for()
    assert node.locator(".badge").first.inner_text() == "failed"


def test_a_gate_shows_the_text_of_the_file_it_names(browser: Any, tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    store = gated_folder(folder)
    with serve_in(folder, store) as url, signed_in(browser, url, FILES_TOKEN) as tab:
        tab.goto(f"{url}/ui#/runs/notes")
        shown = tab.locator(".gate .gate-file[data-key='notes']")
        shown.wait_for()
        # The notes themselves, as text: the markup in them is not run, nor drawn.
        assert shown.locator("pre").text_content() == NOTES
        assert tab.locator(".gate .gate-file script").count() == 0
        assert "notes.md" in shown.locator("summary").inner_text()
        big = tab.locator(".gate .gate-file[data-key='big'] summary").inner_text()
        assert "cut: the first 64 KiB of 70000 bytes" in big
        assert tab.locator(".gate .gate-file").count() == 2
        shot(tab, "gate-file.png")


CONTROLLED = """
graph: controlled
nodes:
  - id: agent
    machine: agent
    with: {phases: {"*": {tools: [read_file, advance]}}}
    bind:
      think:
        llm:
          model: m
          prompt: Read notes.md, then advance.
          tools: [read_file, advance]
          tool_choice: required
          parallel_tool_calls: false
      act: {tools: conversation}
"""
CONTROLLED_SCRIPT = [
    {"content": "The notes are probably fine."},  # prose where a call is required
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]},
    {"tool_calls": [{"name": "advance", "arguments": {}}]},
]


def test_a_turn_shows_its_controls_and_the_answer_asked_again(browser: Any, tmp_path: Path) -> None:
    (tmp_path / "controlled.yaml").write_text(CONTROLLED, encoding="utf-8")
    (tmp_path / "script.json").write_text(json.dumps(CONTROLLED_SCRIPT), encoding="utf-8")
    (tmp_path / "notes.md").write_text("- one\n", encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    with subprocess.Popen(
        cli_argv("model-server", "--script", "script.json", "--port", "0"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as model:
        assert model.stdout is not None
        env = {**os.environ, "PHASEGRAPH_LLM_BASE_URL": model.stdout.readline().strip()}
        try:
            ran = subprocess.run(
                cli_argv("run", "controlled.yaml", "--store", store, "--run-id", "c", "-q"),
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            model.terminate()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with serve_in(tmp_path, store) as url, signed_in(browser, url, FILES_TOKEN) as tab:
        tab.goto(f"{url}/ui#/runs/c")
        talk = tab.locator(".conversation .talk[data-key='conversation']")
        talk.wait_for()
        # The prose answer is kept, flagged, and followed by why it was asked again.
        again = talk.locator(".msg.role-assistant.refused-answer")
        assert again.count() == 1
        assert "The notes are probably fine." in again.inner_text()
        assert again.locator(".turn-facts").count() == 0
        told = talk.locator(".msg.role-user").nth(1).inner_text()
        assert "must call one of the tools" in told
        # The answer kept carries the turn's facts: what the binding asked of it.
        facts = talk.locator(".msg.role-assistant:not(.refused-answer) .turn-facts").first
        assert "tool_choice required" in facts.inner_text()
        assert "one call an answer" in facts.inner_text()
        assert "1 answer asked again" in facts.inner_text()
        shot(tab, "conversation-turn-controls.png")


def test_a_run_whose_graph_file_changed_shows_and_runs_what_it_started_with(
    page: Any, served: Served, tmp_path: Path
) -> None:
    # A run started from a graph file (on the command line, in the server's store)...
    definitions = REPO / "tests" / "fixtures" / "definitions"
    graph = tmp_path / "prompted.yaml"
    graph.write_text((definitions / "prompted.yaml").read_text(encoding="utf-8"))
    script = (definitions / "prompted.responses.json").read_text(encoding="utf-8")
    (tmp_path / "prompted.responses.json").write_text(script, encoding="utf-8")

    async def wait_at_the_gate() -> tuple[str, str]:
        async with open_store(served.store) as opened:
            state = await Engine(opened).run(graph, {})
            return state.run_id, state.graph_digest

    run_id, version = _in_thread(wait_at_the_gate())
    # ... whose file then changed, prompts included: the page shows what the run follows.
    graph.write_text(graph.read_text(encoding="utf-8").replace("OLD", "NEW"))
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    page.locator(".meta .version").wait_for()
    assert version[:12] in page.locator(".meta .version").inner_text()
    page.locator("g.node[data-node='write']").click()
    prompts = page.locator("section.prompts")
    prompts.wait_for()
    assert prompts.locator("pre.prompt").all_inner_texts() == [
        "You are the OLD system.",
        "Say the OLD words.",
    ]
    # Answered from the page, it goes on with its stored definition (script included).
    page.locator(".gate button.trigger", has_text="ok").click()
    view = served.wait_for(run_id, "completed")
    assert view["graph_digest"] == version
    page.locator("h1 .badge.st-completed").wait_for(timeout=WAIT_MS)
    shot(page, "run-stored-definition.png")


def test_who_decided_a_step_shows_on_the_run_page(page: Any, served: Served) -> None:
    import getpass

    me = f"local:{getpass.getuser()}"
    graph = str(REPO / "tests" / "fixtures" / "gates" / "reviewed.yaml")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = cli_argv(*args, "--store", served.store)
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    run_id = "viewer-actors"
    assert cli("run", graph, "--run-id", run_id, "-q").returncode == 3  # waits at the gate
    page.goto(f"{served.url}/ui#/runs/{run_id}")
    gate = page.locator(".gate")
    gate.wait_for()
    assert gate.locator(".reviewers").inner_text() == "Reviewers: alice, group:release"
    started = page.locator("tr[data-seq='0'] .actor")
    started.wait_for()
    assert re.fullmatch(rf" · started by {re.escape(me)} at \d\d:\d\d:\d\d", started.inner_text())

    answered = cli("reply", run_id, "--id", f"{run_id}:review:run", "--trigger", "ok")
    assert answered.returncode == 0, answered.stderr
    page.locator("h1 .badge.st-completed").wait_for()
    reply = page.locator("tr:has(.actor:has-text('answered ok by'))")
    reply.wait_for()
    assert me in reply.inner_text()
    shot(page, "run-actors.png")
