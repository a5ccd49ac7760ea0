"""The built-in model machines check clean, and check knows actions spend `tokens`."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import REPO
from phasegraph.analysis import Severity, check

MODEL_MACHINES = ["agent", "agent_quality_loop", "solo_agent", "guarded_agent"]


@pytest.mark.parametrize("name", MODEL_MACHINES)
def test_the_model_machines_check_without_findings(name: str) -> None:
    report = check(name)
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []


def test_a_budget_only_actions_spend_can_run_out_at_any_step(tmp_path: Path) -> None:
    # Without this, check would call the gave_up transitions dead: no state spends tokens.
    text = (REPO / "states" / "agent.yaml").read_text(encoding="utf-8")
    path = tmp_path / "my_agent.yaml"
    path.write_text(text.replace("machine: agent", "machine: my_agent"), encoding="utf-8")
    assert [f.message for f in check(path).findings] == []
    # Drop the way out when tokens run out after a tool call: check finds the gap.
    stuck = text.replace("machine: agent", "machine: my_agent").replace(
        "  - {trigger: observed, source: act, dest: gave_up}\n", ""
    )
    path.write_text(stuck, encoding="utf-8")
    [finding] = check(path).findings
    assert finding.code == "guard-gap"
    assert "trigger 'observed' in state 'act' is refused" in finding.message
    assert "tokens spent" in finding.message
