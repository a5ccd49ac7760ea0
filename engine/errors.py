"""The phasegraph exception tree.

Every error phasegraph raises derives from :class:`PhasegraphError`, carries an
:class:`ErrorCode` (which the CLI maps to an exit status and the server to an HTTP
status) and structured context (location, run, node, seq)::

    PhasegraphError
    ├── SpecError(ValueError)            bad YAML / schema / cycle / unbound hook
    ├── InputError(ValueError)           bad command-line or API argument (store URL, input)
    ├── RunError(RuntimeError)
    │   ├── IllegalTriggerError          trigger not legal in the current state
    │   ├── BudgetExhaustedError         a budget would be exceeded
    │   ├── ActionError                  an action could not run or returned garbage
    │   │   └── ActionTimeoutError(TimeoutError)  an action ran past its deadline
    │   ├── LoopDetectedError            an action kept repeating the same call
    │   ├── DataConflictError            two unordered nodes wrote the same data key
    │   ├── RunStateError                operation not allowed in the run's status
    │   └── RunNotFoundError(LookupError)
    ├── StoreError
    │   ├── LeaseHeldError               another live writer holds the run
    │   ├── LeaseLostError               our lease was taken over (fencing)
    │   ├── SequenceConflictError        commit seq is not head + 1
    │   └── StoreUnavailableError        driver connection failures and timeouts
    └── CodecError(ValueError)
        └── UnsupportedFormatError       snapshot written by a newer format
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ActionError",
    "ActionTimeoutError",
    "BudgetExhaustedError",
    "CodecError",
    "DataConflictError",
    "ErrorCode",
    "IllegalTriggerError",
    "InputError",
    "LeaseHeldError",
    "LeaseLostError",
    "LoopDetectedError",
    "PhasegraphError",
    "Problem",
    "RunError",
    "RunNotFoundError",
    "RunStateError",
    "SequenceConflictError",
    "SourceLocation",
    "SpecError",
    "StoreError",
    "StoreUnavailableError",
    "UnsupportedFormatError",
]


class ErrorCode(StrEnum):
    """Stable machine-readable codes for every error family."""

    SPEC = "spec_invalid"
    INPUT = "bad_input"
    ILLEGAL_TRIGGER = "illegal_trigger"
    BUDGET_EXHAUSTED = "budget_exhausted"
    ACTION_FAILED = "action_failed"
    DATA_CONFLICT = "data_conflict"
    RUN_STATE = "run_state"
    RUN_NOT_FOUND = "run_not_found"
    STORE = "store_error"
    LEASE_HELD = "lease_held"
    LEASE_LOST = "lease_lost"
    SEQUENCE_CONFLICT = "sequence_conflict"
    STORE_UNAVAILABLE = "store_unavailable"
    CODEC = "codec_error"
    UNSUPPORTED_FORMAT = "unsupported_format"
    LOOP_DETECTED = "loop_detected"


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """A position in a YAML file (1-based line and column)."""

    path: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.path
        if self.column is None:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a definition, and where it is."""

    message: str
    location: SourceLocation | None = None

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class PhasegraphError(Exception):
    """Root of every phasegraph error.

    Attributes:
        code: The stable error code.
        run_id: The run concerned, when there is one.
        node_id: The node concerned, when there is one.
        seq: The step concerned, when there is one.
    """

    code: ErrorCode = ErrorCode.STORE

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        node_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.node_id = node_id
        self.seq = seq


class SpecError(PhasegraphError, ValueError):
    """A machine or graph definition is invalid; lists every problem found."""

    code = ErrorCode.SPEC

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        lines = [str(p) for p in self.problems]
        super().__init__("\n".join(lines) if lines else "invalid definition")


class InputError(PhasegraphError, ValueError):
    """An argument is malformed: a store URL, a ``key=value`` input, a seq."""

    code = ErrorCode.INPUT


class RunError(PhasegraphError, RuntimeError):
    """A run cannot proceed as asked."""

    code = ErrorCode.RUN_STATE


class IllegalTriggerError(RunError):
    """A trigger is not legal in the node's current state.

    Attributes:
        trigger: The trigger that was fired.
        state: The state it was fired in.
        legal: The triggers that state accepts.
    """

    code = ErrorCode.ILLEGAL_TRIGGER

    def __init__(
        self,
        trigger: str,
        state: str,
        legal: tuple[str, ...],
        *,
        reason: str = "is not legal",
        node_id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.trigger = trigger
        self.state = state
        self.legal = legal
        legal_text = ", ".join(legal) if legal else "none"
        where = f"node {node_id!r}: " if node_id else ""
        super().__init__(
            f"{where}trigger {trigger!r} {reason} in state {state!r} "
            f"(legal triggers: {legal_text})",
            node_id=node_id,
            run_id=run_id,
        )


class BudgetExhaustedError(RunError):
    """A transition would spend a budget that has nothing left."""

    code = ErrorCode.BUDGET_EXHAUSTED


class ActionError(RunError):
    """An action could not be run, or returned something that is not a result."""

    code = ErrorCode.ACTION_FAILED


class ActionTimeoutError(ActionError, TimeoutError):
    """An action ran past its deadline and was abandoned; classified ``timeout``."""


class LoopDetectedError(RunError):
    """An action or tool call kept repeating with the same arguments after a warning.

    Raised by the ``loop_detection`` middleware on the second consecutive detection; the
    ``error`` trigger classifies it as ``loop_detected`` (retryable).
    """

    code = ErrorCode.LOOP_DETECTED


class DataConflictError(RunError):
    """Two nodes that may run concurrently wrote the same data key without a reducer."""

    code = ErrorCode.DATA_CONFLICT


class RunStateError(RunError):
    """The operation is not allowed in the run's current status."""

    code = ErrorCode.RUN_STATE


class RunNotFoundError(RunError, LookupError):
    """No run with that id exists in the store."""

    code = ErrorCode.RUN_NOT_FOUND


class StoreError(PhasegraphError):
    """The store refused or failed an operation."""

    code = ErrorCode.STORE


class LeaseHeldError(StoreError):
    """Another live writer holds the run's lease."""

    code = ErrorCode.LEASE_HELD


class LeaseLostError(StoreError):
    """Our lease expired and was taken over; this writer may no longer commit."""

    code = ErrorCode.LEASE_LOST


class SequenceConflictError(StoreError):
    """A commit's seq is not the head's successor: another writer got there first."""

    code = ErrorCode.SEQUENCE_CONFLICT


class StoreUnavailableError(StoreError):
    """The store could not be reached (connection refused, timeout, I/O failure)."""

    code = ErrorCode.STORE_UNAVAILABLE


class CodecError(PhasegraphError, ValueError):
    """Bytes could not be encoded or decoded as a phasegraph payload."""

    code = ErrorCode.CODEC


class UnsupportedFormatError(CodecError):
    """A payload was written by a newer phasegraph format version."""

    code = ErrorCode.UNSUPPORTED_FORMAT
