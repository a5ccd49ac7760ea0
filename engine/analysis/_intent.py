"""What a machine says but cannot mean: a failure told as success, a spend bounding nothing.

* ``misnamed-outcome``: a final state named like a failure (``gave_up``, ``failed``,
  ``error``...) whose outcome is ``success`` and that only failure triggers (``error``,
  ``fail``, ``timeout``) lead to: the node's failure would be reported as a success, and
  its dependents would run.
* ``entry-only-spend``: a budget spent only on states no transition enters (the initial
  state, entered once as the node starts): it counts one unit and never bounds a loop.
"""

from __future__ import annotations

import re
from typing import Final

from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.model import MachineDef, NodeOutcome

__all__ = ["intent_findings"]

_FAILURE_NAME: Final = re.compile(
    r"(^|_)(fail|failed|failure|error|errored|gave_up|give_up|giveup|abort|aborted|"
    r"rejected|broken|crashed|emergency|exhausted|timed_out|timeout)($|_)",
    re.IGNORECASE,
)
_FAILURE_TRIGGERS: Final = frozenset({"error", "fail", "timeout"})


def intent_findings(machine: MachineDef) -> list[Finding]:
    """Misnamed outcomes and spends on entry only, in declaration order."""
    return [*_misnamed(machine), *_entry_only(machine)]


def _misnamed(machine: MachineDef) -> list[Finding]:
    findings = []
    for state in machine.states.values():
        if state.final is not NodeOutcome.SUCCESS or not _FAILURE_NAME.search(state.name):
            continue
        triggers = sorted({t.trigger for t in machine.transitions if t.dest == state.name})
        if not triggers or not set(triggers) <= _FAILURE_TRIGGERS:
            continue
        text = (
            f"state {state.name!r} of machine {machine.name!r} is final with outcome success, "
            f"but it is named like a failure and only failure triggers lead to it "
            f"({', '.join(triggers)}): a node that gives up would be reported as succeeding "
            f"and its dependents would run; use `final: failed` (or `gave_up`)"
        )
        findings.append(
            Finding(
                severity=Severity.WARNING,
                code=Code.MISNAMED_OUTCOME,
                message=text,
                location=state.location,
            )
        )
    return findings


def _entry_only(machine: MachineDef) -> list[Finding]:
    entered = {t.dest for t in machine.transitions}
    findings = []
    for budget in machine.budgets.values():
        if not budget.spend_on or any(state in entered for state in budget.spend_on):
            continue
        states = ", ".join(budget.spend_on)
        text = (
            f"budget {budget.name!r} of machine {machine.name!r} is spent only on entering "
            f"{states}, which no transition enters (a node enters its initial state once, as "
            f"it starts): it counts one unit and never bounds a loop; list the states of the "
            f"loop it should bound in its spend_on"
        )
        findings.append(
            Finding(
                severity=Severity.WARNING,
                code=Code.ENTRY_ONLY_SPEND,
                message=text,
                location=machine.location,
            )
        )
    return findings
