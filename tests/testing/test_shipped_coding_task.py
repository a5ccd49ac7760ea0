"""``phasegraph test coding_task`` passes: a model in a git repository, crash-equivalent."""

from __future__ import annotations

from pathlib import Path

from shipped_kit import passes_phasegraph_test


def test_phasegraph_test_passes_coding_task(tmp_path: Path) -> None:
    passes_phasegraph_test("coding_task", tmp_path)
