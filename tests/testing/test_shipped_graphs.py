"""``phasegraph test`` passes the shipped graphs that run in seconds (``hello`` is in
test_verify.py, ``team_plan`` in the tutorial's page; the slower agents have a file each,
so that the suite's workers take them at once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shipped_kit import passes_phasegraph_test


@pytest.mark.parametrize("graph", ["agent_pipeline", "team_pipeline", "research_agent"])
def test_phasegraph_test_passes_a_shipped_graph(graph: str, tmp_path: Path) -> None:
    passes_phasegraph_test(graph, tmp_path)
