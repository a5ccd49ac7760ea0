"""``phasegraph test git_agent`` passes: git through an MCP server, crash-equivalent."""

from __future__ import annotations

from pathlib import Path

from shipped_kit import passes_phasegraph_test


def test_phasegraph_test_passes_git_agent(tmp_path: Path) -> None:
    passes_phasegraph_test("git_agent", tmp_path)
