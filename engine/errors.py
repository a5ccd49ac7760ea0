"""The phasegraph exception tree.

Every error phasegraph raises derives from :class:`PhasegraphError` and carries its own
:class:`ErrorCode` (which the CLI maps to an exit status and the server to an HTTP
status) and structured context (location, run, node, seq)::

    PhasegraphError                        phasegraph_error    any other phasegraph failure
    ├── SpecError(ValueError)              spec_invalid        bad YAML / schema / cycle / hook
    │   └── DefinitionUnavailableError     definition_unavailable  a run's stored one fails here
    ├── InputError(ValueError)             bad_input           bad CLI or API argument
    │   └── RequestError                   bad_request         malformed HTTP request field
    ├── RunError(RuntimeError)             run_error           a run cannot proceed as asked
    │   ├── IllegalTriggerError            illegal_trigger     trigger not legal in the state
    │   ├── BudgetExhaustedError           budget_exhausted    a budget would be exceeded
    │   │   └── SpendRefusedError          spend_refused       a model call's spend does not fit
    │   ├── ActionError                    action_failed       action failed or returned garbage
    │   │   └── ActionTimeoutError(TimeoutError)  action_timeout  an action ran past its deadline
    │   ├── LoopDetectedError              loop_detected       an action repeats the same call
    │   ├── DataConflictError              data_conflict       unordered nodes wrote one key
    │   ├── RunStateError                  run_state           not allowed in the run's status
    │   │   ├── NotAReviewerError          not_a_reviewer      the gate names other reviewers
    │   │   ├── GateAnsweredError          gate_answered       the gate was answered already
    │   │   ├── StaleReplyError            stale_reply         the reply's gate step is past
    │   │   └── RunBusyError               run_busy            a message found the run busy
    │   └── RunNotFoundError(LookupError)  run_not_found       no such run or seq
    ├── StoreError                         store_error         the store refused an operation
    │   ├── LeaseHeldError                 lease_held          another live writer holds the run
    │   ├── LeaseLostError                 lease_lost          our lease was taken (fencing)
    │   ├── SequenceConflictError          sequence_conflict   commit seq is not head + 1
    │   ├── JournalHeadError               journal_head_mismatch  records do not end at the head
    │   └── StoreUnavailableError          store_unavailable   unreachable or closed, timeouts
    └── CodecError(ValueError)             codec_error         bytes are not a phasegraph payload
        └── UnsupportedFormatError         unsupported_format  written by a newer format

:meth:`PhasegraphError.context` gives the fields that are set, JSON-ready: the server puts
them in its problem bodies and the CLI in its ``--json`` error output. The test kit's
``PropertyFailed`` stays outside the tree: it is a test verdict (an ``AssertionError``),
never raised by a run, the CLI or the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "ActionError",
    "ActionTimeoutError",
    "BudgetExhaustedError",
    "CodecError",
    "DataConflictError",
    "DefinitionUnavailableError",
    "ErrorCode",
    "GateAnsweredError",
    "IllegalTriggerError",
    "InputError",
    "JournalHeadError",
    "LeaseHeldError",
    "LeaseLostError",
    "LoopDetectedError",
    "NotAReviewerError",
    "PhasegraphError",
    "Problem",
    "RequestError",
    "RunBusyError",
    "RunError",
    "RunNotFoundError",
    "RunStateError",
    "SequenceConflictError",
    "SourceLocation",
    "SpecError",
    "SpendRefusedError",
    "StaleReplyError",
    "StoreError",
    "StoreUnavailableError",
    "UnsupportedFormatError",
]


class ErrorCode(StrEnum):
    """Stable machine-readable codes: one per class of the tree."""

    PHASEGRAPH = "phasegraph_error"
    SPEC = "spec_invalid"
    DEFINITION_UNAVAILABLE = "definition_unavailable"
    INPUT = "bad_input"
    BAD_REQUEST = "bad_request"
    RUN = "run_error"
    ILLEGAL_TRIGGER = "illegal_trigger"
    BUDGET_EXHAUSTED = "budget_exhausted"
    SPEND_REFUSED = "spend_refused"
    ACTION_FAILED = "action_failed"
    ACTION_TIMEOUT = "action_timeout"
    DATA_CONFLICT = "data_conflict"
    RUN_STATE = "run_state"
    NOT_A_REVIEWER = "not_a_reviewer"
    GATE_ANSWERED = "gate_answered"
    STALE_REPLY = "stale_reply"
    RUN_BUSY = "run_busy"
    RUN_NOT_FOUND = "run_not_found"
    STORE = "store_error"
    LEASE_HELD = "lease_held"
    LEASE_LOST = "lease_lost"
    SEQUENCE_CONFLICT = "sequence_conflict"
    JOURNAL_HEAD = "journal_head_mismatch"
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
        code: The stable error code of the class.
        message: What went wrong.
        location: Where in a definition file, when there is such a place.
        run_id: The run concerned, when there is one.
        node_id: The node concerned, when there is one.
        seq: The step concerned, when there is one.
    """

    code: ClassVar[ErrorCode] = ErrorCode.PHASEGRAPH

    def __init__(
        self,
        message: str,
        *,
        location: SourceLocation | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.run_id = run_id
        self.node_id = node_id
        self.seq = seq

    def add_context(self, *, run_id: str) -> None:
        """Name the run, for an error raised by a layer that does not know it."""
        if self.run_id is None:
            self.run_id = run_id

    def context(self) -> dict[str, Any]:
        """The structured fields that are set, as JSON-ready values."""
        fields = {
            "location": None if self.location is None else str(self.location),
            "run_id": self.run_id,
            "node_id": self.node_id,
            "seq": self.seq,
        }
        return {key: value for key, value in fields.items() if value is not None}


class SpecError(PhasegraphError, ValueError):
    """A machine or graph definition is invalid; lists every problem found."""

    code = ErrorCode.SPEC

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        lines = [str(p) for p in self.problems]
        first = next((p.location for p in self.problems if p.location is not None), None)
        super().__init__("\n".join(lines) if lines else "invalid definition", location=first)

    def context(self) -> dict[str, Any]:
        """The base fields (``location``: the first problem's) and every problem."""
        problems = [
            {"message": p.message, "location": None if p.location is None else str(p.location)}
            for p in self.problems
        ]
        return {**super().context(), "problems": problems}


class DefinitionUnavailableError(SpecError):
    """A run's stored definition does not load in this process.

    A Python module it imports is missing here, say: another process, which has what it
    needs, may drive the run.
    """

    code = ErrorCode.DEFINITION_UNAVAILABLE

    def __init__(self, problems: list[Problem] | tuple[Problem, ...], *, run_id: str) -> None:
        super().__init__(problems)
        self.run_id = run_id


class InputError(PhasegraphError, ValueError):
    """An argument is malformed: a store URL, a ``key=value`` input, a seq."""

    code = ErrorCode.INPUT


class RequestError(InputError):
    """An HTTP request is malformed; names each bad field.

    Attributes:
        fields: ``(field path, what is wrong)`` pairs, e.g. ``("body.input", "...")``.
    """

    code = ErrorCode.BAD_REQUEST

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self.fields = tuple(fields)
        super().__init__("; ".join(f"{where}: {what}" for where, what in self.fields))

    def context(self) -> dict[str, Any]:
        """The base fields and each bad field with what is wrong with it."""
        problems = [{"field": field, "message": what} for field, what in self.fields]
        return {**super().context(), "problems": problems}


class RunError(PhasegraphError, RuntimeError):
    """A run cannot proceed as asked."""

    code = ErrorCode.RUN


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

    def context(self) -> dict[str, Any]:
        """The base fields and the triggers the state accepts."""
        return {**super().context(), "legal_triggers": list(self.legal)}


class BudgetExhaustedError(RunError):
    """A transition would spend a budget that has nothing left."""

    code = ErrorCode.BUDGET_EXHAUSTED


class SpendRefusedError(BudgetExhaustedError):
    """The run's budget cannot reserve what a model call may spend.

    Attributes:
        asked: What the call would reserve (``tokens``, ``money`` in millionths).
        left: What the run's budget had left (the same keys; a limit it lacks is absent).
        used: What the step's earlier answers spent already (charged to the node).
    """

    code = ErrorCode.SPEND_REFUSED

    def __init__(
        self,
        message: str,
        *,
        asked: Mapping[str, int],
        left: Mapping[str, int],
        used: Mapping[str, int] | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, node_id=node_id)
        self.asked = dict(asked)
        self.left = dict(left)
        self.used = dict(used or {})

    def context(self) -> dict[str, Any]:
        """The base fields, what was asked and what was left."""
        return {**super().context(), "asked": self.asked, "left": self.left}


class ActionError(RunError):
    """An action could not be run, or returned something that is not a result."""

    code = ErrorCode.ACTION_FAILED


class ActionTimeoutError(ActionError, TimeoutError):
    """An action ran past its deadline and was abandoned; classified ``timeout``."""

    code = ErrorCode.ACTION_TIMEOUT


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


class NotAReviewerError(RunStateError):
    """Whoever replied is not among the reviewers the gate names; nothing was committed.

    Attributes:
        gate: The interrupt id of the gate.
        reviewers: Who may answer it (principal names and ``group:NAME`` entries).
        actor: The name of whoever was refused.
    """

    code = ErrorCode.NOT_A_REVIEWER

    def __init__(
        self, message: str, *, gate: str, reviewers: tuple[str, ...], actor: str, run_id: str
    ) -> None:
        super().__init__(message, run_id=run_id)
        self.gate = gate
        self.reviewers = reviewers
        self.actor = actor

    def context(self) -> dict[str, Any]:
        """The base fields, the gate, who may answer it and who was refused."""
        return {
            **super().context(),
            "gate": self.gate,
            "reviewers": list(self.reviewers),
            "actor": self.actor,
        }


class GateAnsweredError(RunStateError):
    """The reply is for a gate opening that was answered already: a reply applies once.

    Attributes:
        gate: The interrupt id of the gate.
        answered_at: The step that answered it.
        answered_by: Who answered it, when the answer named someone.
    """

    code = ErrorCode.GATE_ANSWERED

    def __init__(
        self, message: str, *, gate: str, answered_at: int, answered_by: str | None, run_id: str
    ) -> None:
        super().__init__(message, run_id=run_id, seq=answered_at)
        self.gate = gate
        self.answered_at = answered_at
        self.answered_by = answered_by

    def context(self) -> dict[str, Any]:
        """The base fields, the gate, the step that answered it and by whom."""
        by = {} if self.answered_by is None else {"answered_by": self.answered_by}
        return {**super().context(), "gate": self.gate, "answered_at": self.answered_at, **by}


class StaleReplyError(RunStateError):
    """The reply quotes a step of the gate that is not the one it waits at now.

    Attributes:
        gate: The interrupt id of the gate.
        step: The step the reply quoted.
        current: The step that opened the gate now pending, or ``None`` if it is closed.
    """

    code = ErrorCode.STALE_REPLY

    def __init__(
        self, message: str, *, gate: str, step: int, current: int | None, run_id: str
    ) -> None:
        super().__init__(message, run_id=run_id)
        self.gate = gate
        self.step = step
        self.current = current

    def context(self) -> dict[str, Any]:
        """The base fields, the gate, the step quoted and the pending opening's step."""
        now = {} if self.current is None else {"current_step": self.current}
        return {**super().context(), "gate": self.gate, "step": self.step, **now}


class RunBusyError(RunStateError):
    """A message found the run busy, and its graph (or gate) refuses messages then.

    Attributes:
        node: The node the run is busy with (``None``: it has a message to take first).
        state: That node's state, its path joined with ``.``.
        step: The run's last committed step.
    """

    code = ErrorCode.RUN_BUSY

    def __init__(
        self, message: str, *, run_id: str, node: str | None, state: str | None, step: int
    ) -> None:
        super().__init__(message, run_id=run_id, seq=step)
        self.node = node
        self.state = state
        self.step = step

    def context(self) -> dict[str, Any]:
        """The base fields, and the node and state the run is busy at."""
        where = {} if self.node is None else {"node": self.node, "state": self.state}
        return {**super().context(), **where}


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
    """Our lease is no longer the run's: another holder took the run, or it was released.

    A run stopped because its store stayed silent for a whole lease is stopped with this
    error too (the lease may lapse and be taken), its message saying which it was.

    Attributes:
        holder: Who holds the run's lease now, when the store said (an owner string).
    """

    code = ErrorCode.LEASE_LOST

    def __init__(
        self,
        message: str,
        *,
        holder: str | None = None,
        run_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, seq=seq)
        self.holder = holder


class SequenceConflictError(StoreError):
    """A commit's seq is not the head's successor: another writer got there first."""

    code = ErrorCode.SEQUENCE_CONFLICT


class JournalHeadError(StoreError):
    """A run's step records do not end at the head seq its metadata names.

    The last record is missing, or records lie past the head (the metadata's seq was
    rolled back): the store was changed outside phasegraph or damaged. The run is refused
    whole, by every read and before anything runs, so nothing is re-run or overwritten.
    ``seq`` is the head the metadata names.

    Attributes:
        last_stored: The seq of the last step record stored (-1: none is).
    """

    code = ErrorCode.JOURNAL_HEAD

    def __init__(self, message: str, *, run_id: str, seq: int, last_stored: int) -> None:
        super().__init__(message, run_id=run_id, seq=seq)
        self.last_stored = last_stored

    def context(self) -> dict[str, Any]:
        """The base fields and the seq of the last step record stored."""
        return {**super().context(), "last_stored_seq": self.last_stored}


class StoreUnavailableError(StoreError):
    """The store could not be reached (connection refused, timeout, I/O failure)."""

    code = ErrorCode.STORE_UNAVAILABLE


class CodecError(PhasegraphError, ValueError):
    """Bytes could not be encoded or decoded as a phasegraph payload."""

    code = ErrorCode.CODEC


class UnsupportedFormatError(CodecError):
    """A payload was written by a newer phasegraph format version."""

    code = ErrorCode.UNSUPPORTED_FORMAT
