"""The tutorial's agent page, answered in the viewer: its gate clicked in a real browser.

The page runs as written up to ``## Answer the gate`` (one session, one folder, the real
CLI), then its own ``phasegraph serve`` block runs, word for word, in that folder. The
address the server prints is opened in Debian's Chromium through Playwright, as the page
tells a reader to: find ``notes-1`` among the waiting runs, open it, click ``ok``. The
page then shows the run completed, and so does ``phasegraph status``. Without Chromium or
Playwright this test skips, except under ``CI=true``, where it fails (as the other
viewer tests do).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from doc_kit import DOCS, REPO, Session, blocks, heading_line, run_page

# The one home of the browser fixture and the screenshots.
from browser_kit import WAIT_MS, browser, shot

__all__ = ["browser"]  # the browser fixture, shared

PAGE = DOCS / "tutorial" / "agent.md"
GATE = "## Answer the gate"
HERE = Path(__file__).resolve().relative_to(REPO).as_posix()
STARTED_MS = 60_000  # how long the server may take to print its address: a failure guard
VIEWER_LINE = re.compile(r"^\s*viewer (http://\S+/ui)$")


def _serve_command() -> str:
    """The page's one block this file tests: the ``phasegraph serve`` line a reader types."""
    found = [b for b in blocks(PAGE) if b.marker == "tested by" and b.argument == HERE]
    assert len(found) == 1, f"{PAGE}: {len(found)} blocks are tested by {HERE}, expected 1"
    (block,) = found
    assert block.text.startswith("phasegraph serve"), block.text
    assert block.line > heading_line(PAGE, GATE), f"{block.where}: not under {GATE!r}"
    return block.text


@contextmanager
def _serving(session: Session) -> Iterator[str]:
    """Run the page's serve block in the session's folder; yield the viewer's address."""
    lines: queue.Queue[str | None] = queue.Queue()

    def drain(stream: Any) -> None:
        # Read all of stderr, so the server's request log never fills the pipe.
        for line in stream:
            lines.put(line)
        lines.put(None)

    with subprocess.Popen(
        ["bash", "-e", "-c", _serve_command()],
        cwd=session.folder, env=session.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    ) as server:  # fmt: skip
        reader = threading.Thread(target=drain, args=(server.stderr,), daemon=True)
        reader.start()
        said: list[str] = []
        try:
            while True:
                line = lines.get(timeout=STARTED_MS / 1000)
                assert line is not None, f"serve ended before printing the viewer:\n{''.join(said)}"
                said.append(line)
                match = VIEWER_LINE.match(line.rstrip("\n"))
                if match:
                    break
            yield match[1]
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # its own process group: bash and serve
            server.wait(timeout=30)
            reader.join(timeout=30)


def _status(session: Session) -> dict[str, Any]:
    done = subprocess.run(
        ["phasegraph", "status", "notes-1", "--json"], cwd=session.folder, env=session.env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def test_the_tutorial_gate_is_answered_in_the_viewer(browser: Any, tmp_path: Path) -> None:
    session = run_page(PAGE, tmp_path, until=GATE)
    assert _status(session)["status"] == "waiting"

    with _serving(session) as viewer:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        tab = context.new_page()
        tab.set_default_timeout(WAIT_MS * 4)  # an agent's page on a busy machine
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        try:
            # "Open that address. The runs list calls out the runs waiting for an answer."
            tab.goto(viewer)
            row = tab.locator("table.runs tr:has(a:text-is('notes-1'))")
            row.wait_for()
            assert "attention" in (row.get_attribute("class") or "")
            assert row.locator(".badge").inner_text() == "waiting"
            # "Click notes-1: its page shows the gate, ... one button per answer."
            row.locator("a:text-is('notes-1')").click()
            gate = tab.locator(".gate")
            gate.wait_for()
            assert "notes.md" in gate.locator("pre.json").inner_text()  # the payload
            # "... and the notes themselves, to judge."
            notes = gate.locator(".gate-file[data-key='notes'] pre")
            assert notes.text_content() == "- durable\n- explicit\n- replayable\n"
            assert gate.locator("button.trigger").all_inner_texts() == ["ok", "fail"]
            shot(tab, "tutorial-agent-gate.png")
            # "Click ok. ... its badge turns to completed."
            gate.locator("button.trigger", has_text="ok").click()
            tab.locator("h1 .badge.st-completed").wait_for()
            shot(tab, "tutorial-agent-completed.png")
        finally:
            context.close()
        assert errors == [], errors  # no script error on the pages the reader saw

    # "... and phasegraph status notes-1 says completed too."
    status = _status(session)
    assert status["status"] == "completed"
    assert status["interrupts"] == []
    assert status["nodes"]["review"]["status"] == "completed"
