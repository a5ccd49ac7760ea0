"""``check`` finds what a machine says but cannot mean (the two misses of earlier rounds)."""

from __future__ import annotations

from pathlib import Path

from phasegraph.analysis import Code, Severity, check

_GIVES_UP_AS_SUCCESS = """
machine: tries
initial: work
budgets: {attempts: {limit: 2, spend_on: [work]}}
states:
  work: {}
  done: {final: success}
  gave_up: {final: success}
transitions:
  - {trigger: ok, source: work, dest: done}
  - {trigger: fail, source: work, dest: work, conditions: ["budget:attempts"]}
  - {trigger: fail, source: work, dest: gave_up}
  - {trigger: error, source: work, dest: gave_up}
"""

_SPENT_ON_ENTRY = """
machine: counts
initial: start
budgets: {rounds: {limit: 3, spend_on: [start]}}
states:
  start: {}
  again: {}
  done: {final: success}
transitions:
  - {trigger: ok, source: start, dest: again}
  - {trigger: retry, source: again, dest: again}
  - {trigger: ok, source: again, dest: done}
"""


def _found(tmp_path: Path, text: str, code: Code) -> list[str]:
    path = tmp_path / "machine.yaml"
    path.write_text(text)
    report = check(path)
    found = [f for f in report.findings if f.code is code]
    assert all(f.severity is Severity.WARNING for f in found)
    return [f.message for f in found]


def test_a_give_up_state_that_reports_success_is_found(tmp_path: Path) -> None:
    [message] = _found(tmp_path, _GIVES_UP_AS_SUCCESS, Code.MISNAMED_OUTCOME)
    assert "state 'gave_up' of machine 'tries' is final with outcome success" in message
    assert "only failure triggers lead to it (error, fail)" in message
    assert "use `final: failed`" in message
    fixed = _GIVES_UP_AS_SUCCESS.replace("gave_up: {final: success}", "gave_up: {final: failed}")
    assert _found(tmp_path, fixed, Code.MISNAMED_OUTCOME) == []


def test_a_success_reached_by_a_success_trigger_is_not_found(tmp_path: Path) -> None:
    reached = _GIVES_UP_AS_SUCCESS + "  - {trigger: skip, source: work, dest: gave_up}\n"
    assert _found(tmp_path, reached, Code.MISNAMED_OUTCOME) == []


def test_a_budget_spent_only_on_entry_is_found(tmp_path: Path) -> None:
    [message] = _found(tmp_path, _SPENT_ON_ENTRY, Code.ENTRY_ONLY_SPEND)
    assert "budget 'rounds' of machine 'counts' is spent only on entering start" in message
    fixed = _SPENT_ON_ENTRY.replace("spend_on: [start]", "spend_on: [start, again]")
    assert _found(tmp_path, fixed, Code.ENTRY_ONLY_SPEND) == []
