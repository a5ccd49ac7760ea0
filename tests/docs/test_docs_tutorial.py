"""The tutorial's commands are the ones a reader types, and they do what its pages say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_kit import DOCS, REPO, blocks, pages, run_page

TUTORIAL = [page for page in pages() if "tutorial" in page.parts]
# The agent's page, the longest, runs in a file of its own (test_docs_agent.py), so that
# it runs beside the others: the suite hands out a file per worker.
AGENT = DOCS / "tutorial" / "agent.md"


@pytest.mark.parametrize(
    "page", [p for p in TUTORIAL if p != AGENT], ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_the_tutorial_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_the_tutorial_runs_its_commands_rather_than_showing_them() -> None:
    # A broken fence pattern or a marker on every block would pass the test above vacuously.
    run = [b for p in TUTORIAL for b in blocks(p) if b.fence == "sh" and b.marker != "illustration"]
    commands = " ".join(b.text for b in run)
    for command in ("phasegraph run", "phasegraph reply", "phasegraph check", "model-server"):
        assert command in commands
    assert [p.name for p in TUTORIAL] == sorted(p.name for p in (DOCS / "tutorial").glob("*.md"))


def test_the_check_output_shown_on_page_two_is_what_check_prints(tmp_path: Path) -> None:
    page = DOCS / "tutorial" / "first-graph.md"
    session = run_page(page, tmp_path, until="## Run it and answer the gate")
    found = blocks(page)
    [command] = [b for b in found if b.marker == "exit" and "broken.yaml" in b.text]
    shown = next(b for b in found if b.line > command.line and b.fence == "text")
    checked = subprocess.run(
        ["phasegraph", "check", "broken.yaml"],
        cwd=tmp_path,
        env=session.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 1
    assert checked.stdout == shown.text


def test_the_tutorials_check_script_fails_with_a_sentence(tmp_path: Path) -> None:
    page = DOCS / "tutorial" / "agent.md"
    [script] = [b for b in blocks(page) if b.marker == "file" and b.argument == "check_notes.py"]
    (tmp_path / "check_notes.py").write_text(script.text, encoding="utf-8")
    missing = subprocess.run(
        [sys.executable, "check_notes.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert missing.returncode == 1
    assert missing.stderr == "notes.md does not exist yet: write it with the write_file tool\n"
    (tmp_path / "notes.md").write_text("- a\n- b\n", encoding="utf-8")
    short = subprocess.run(
        [sys.executable, "check_notes.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert short.stderr == "notes.md has 2 bullet points, not 3\n"
