"""``check`` names each path on which a machine runs a ``once`` action again.

A declared retry (``retries:``) keeps the call's effect id: a note says so, naming the
loop. A state entered again as a new attempt makes a new id: a warning names the loop and
what to declare.
"""

from __future__ import annotations

from pathlib import Path

from phasegraph.analysis import Code, Severity, check

_MACHINE = """
machine: again
initial: main
budgets: {attempts: {limit: 2, spend_on: [wait]}}
states:
  main: {hook: main}
  wait: {hook: wait}
  again: {hook: main}
  done: {final: success}
  failed: {final: failed}
transitions:
  - {trigger: error, source: [main, again], dest: wait, conditions: ["budget:attempts"]}
  - {trigger: error, source: [main, again], dest: failed}
  - {trigger: fail, source: [main, again], dest: failed}
  - {trigger: retry, source: wait, dest: again}
  - {trigger: ok, source: [main, again], dest: done}
"""

_GRAPH = """
graph: bill
machines: [again.yaml]
nodes:
  - id: chain
    machine: fallback_chain
    bind:
      main: {http: {url: "http://127.0.0.1:9/invoice", method: POST}}
      recover: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}
      emergency: {python: "phasegraph.concerns.fallback:emergency", triggers: [fail]}
  - id: loop
    machine: again
    bind:
      main: {http: {url: "http://127.0.0.1:9/invoice", method: POST}$EXTRA}
      wait: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}
"""


def _check(tmp_path: Path, extra: str = "") -> list[tuple[Severity, str]]:
    (tmp_path / "again.yaml").write_text(_MACHINE)
    (tmp_path / "bill.yaml").write_text(_GRAPH.replace("$EXTRA", extra))
    report = check(tmp_path / "bill.yaml")
    return [(f.severity, f.message) for f in report.findings if f.code is Code.ONCE_AGAIN]


def test_a_retry_is_noted_and_a_new_attempt_warned_each_naming_its_loop(tmp_path: Path) -> None:
    [(note, retried), (warning, again)] = _check(tmp_path)

    assert note is Severity.NOTE
    assert "node 'chain'" in retried
    assert "retried on main -> recovery -> retry (machine 'fallback_chain')" in retried
    assert "same effect id" in retried
    assert "on_unknown: ask" in retried
    assert warning is Severity.WARNING
    assert "node 'loop'" in again
    assert "runs again on main -> wait -> again" in again
    assert "declare `retries: main` on state 'again'" in again


def test_an_idempotent_binding_is_not_named(tmp_path: Path) -> None:
    found = _check(tmp_path, extra=", effect: idempotent")
    assert [severity for severity, _ in found] == [Severity.NOTE]


def test_declaring_the_retry_turns_the_warning_into_a_note(tmp_path: Path) -> None:
    declared = _MACHINE.replace("again: {hook: main}", "again: {hook: main, retries: main}")
    (tmp_path / "again.yaml").write_text(declared)
    (tmp_path / "bill.yaml").write_text(_GRAPH.replace("$EXTRA", ""))
    report = check(tmp_path / "bill.yaml")
    found = [f for f in report.findings if f.code is Code.ONCE_AGAIN]
    assert [f.severity for f in found] == [Severity.NOTE, Severity.NOTE]
    assert report.warnings == 0
