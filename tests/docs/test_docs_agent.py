"""The tutorial's agent page runs as written: a model in a quality loop, a fallback, a gate;
and ``phasegraph test`` passes its agent, and the README's, crash-equivalence included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_kit import DOCS, REPO, blocks, environment, run_page

AGENT = DOCS / "tutorial" / "agent.md"


def test_the_agent_page_runs_as_written(tmp_path: Path) -> None:
    run_page(AGENT, tmp_path)


@pytest.mark.parametrize("page", [REPO / "README.md", AGENT], ids=["README", "tutorial"])
def test_phasegraph_test_passes_the_agent_example(page: Path, tmp_path: Path) -> None:
    """The example's own files (the README's graph with the tutorial's model script and
    check), proven by the real command line: a copy crashed before any commit and resumed
    ends as the uninterrupted run, the summarizer's loop detected at the same call."""
    for source in (page, AGENT):
        for block in blocks(source):
            path = tmp_path / block.argument
            if block.marker == "file" and not path.exists():
                path.write_text(block.text, encoding="utf-8")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "phasegraph"), "test", "-q", "notes.yaml",
         "--input", "topic=phasegraph", "--approve"],
        cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      crash-equivalence" in done.stdout
    assert "notes.yaml: 7 properties, 7 hold, 0 fail" in done.stdout
