"""The tutorial's agent page runs as written: a model in a quality loop, a fallback, a gate."""

from __future__ import annotations

from pathlib import Path

from doc_kit import DOCS, run_page


def test_the_agent_page_runs_as_written(tmp_path: Path) -> None:
    run_page(DOCS / "tutorial" / "agent.md", tmp_path)
