"""What ``phasegraph check`` reports: a :class:`Finding`, its :class:`Code`, its severity."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from phasegraph.errors import SourceLocation

__all__ = ["Code", "Finding", "Severity", "github_annotation"]


class Severity(StrEnum):
    """How bad a finding is: an error fails ``check``, a warning only with ``--strict``.

    A note never fails it: it says what was not proved (an incomplete exploration), not a
    defect.
    """

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


class Code(StrEnum):
    """Stable codes of findings (the ``code`` field of ``--json`` output)."""

    INVALID = "invalid-definition"
    YAML = "yaml-syntax"
    UNREACHABLE = "unreachable-state"
    NO_FINAL = "no-final-path"
    UNBOUNDED = "unbounded-cycle"
    OUTCOME_NOT_ACCEPTED = "outcome-not-accepted"
    CANNOT_LEAVE = "hook-cannot-leave"
    TRIGGER_NOT_ACCEPTED = "trigger-not-accepted"
    UNBOUND_HOOK = "unbound-hook"
    UNKNOWN_HOOK = "unknown-hook"
    UNKNOWN_BUDGET = "unknown-budget"
    UNKNOWN_MACHINE = "unknown-machine"
    NESTING_CYCLE = "nested-recursion"
    DAG_CYCLE = "dag-cycle"
    GUARD_GAP = "guard-gap"
    DEAD_TRANSITION = "dead-transition"
    SHADOWED = "shadowed-transition"
    OUTCOME_UNREACHABLE = "outcome-unreachable"
    OVERLAP = "overlapping-guards"
    EXPLORATION_BOUNDED = "exploration-bounded"
    GATE_TIMEOUT = "gate-timeout-unhandled"
    NOT_RUNNABLE = "refused-by-run"
    SHADOWED_FILE = "shadowed-machine-file"
    WRITE_CONFLICT = "write-conflict"
    SUCCESS_FORBIDDEN = "success-forbidden-by-tool-rules"
    CHILD_GRAPH = "child-graph"
    ONCE_AGAIN = "once-effect-again"
    MISNAMED_OUTCOME = "misnamed-outcome"
    ENTRY_ONLY_SPEND = "entry-only-spend"
    MESSAGES_NEVER_TAKEN = "messages-never-taken"
    MESSAGE_WAITS = "message-waits-for-ever"
    GATE_BUSY_IGNORED = "gate-busy-ignored"
    UNBUDGETED_CALL = "unbudgeted-model-call"
    CALL_OVER_BUDGET = "model-call-over-budget"
    PAYLOAD_NOT_CARRIED = "payload-not-carried"
    PAYLOAD_GUARD_UNSATISFIABLE = "payload-guard-unsatisfiable"
    DEPENDENCY_WRITES_ON_FAILURE = "dependency-writes-on-failure"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One thing ``check`` found, and where.

    Attributes:
        severity: Error, warning or note.
        code: What kind of finding it is.
        message: What is wrong and how to fix it.
        location: The file, line and column it is about, when known.
    """

    severity: Severity
    code: Code
    message: str
    location: SourceLocation | None = None

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.severity}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object (``file``/``line``/``column`` may be null)."""
        where = self.location
        return {
            "severity": str(self.severity),
            "code": str(self.code),
            "message": self.message,
            "file": where.path if where else None,
            "line": where.line if where else None,
            "column": where.column if where else None,
        }


def _escape(text: str, *, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def github_annotation(finding: Finding) -> str:
    """The finding as a GitHub Actions workflow command (``::error file=...,line=...::...``)."""
    where = finding.location
    fields = []
    if where is not None and where.path:
        fields.append(f"file={_escape(where.path, property_value=True)}")
        if where.line:
            fields.append(f"line={where.line}")
        if where.column:
            fields.append(f"col={where.column}")
    fields.append(f"title={_escape(str(finding.code), property_value=True)}")
    level = "notice" if finding.severity is Severity.NOTE else str(finding.severity)
    return f"::{level} {','.join(fields)}::{_escape(finding.message)}"
