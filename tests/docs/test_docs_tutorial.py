"""The tutorial's commands are the ones a reader types, and they do what its pages say."""

from __future__ import annotations

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
