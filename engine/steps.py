"""Build step records: pure functions from the run state (and an action result) to a record.

Nothing here does I/O or awaits; the interpreter commits what these functions return.
Keeping step construction pure is what makes snapshots, resume and replay exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionResult
from phasegraph.errors import (
    ActionError,
    BudgetExhaustedError,
    DataConflictError,
    PhasegraphError,
    RunError,
)
from phasegraph.machine import Position, StepResult
from phasegraph.model import (
    EMPTY,
    ErrorRecord,
    NodeOutcome,
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
)
from phasegraph.runtime import Clock, PreparedGraph

__all__ = ["ERROR_TRIGGER", "StepBuilder", "classify_error", "run_status"]

ERROR_TRIGGER = "error"
"""Fired with a classified payload when an action raises in a state that accepts it."""

_STATUS_FOR_OUTCOME = {
    None: NodeStatus.RUNNING,
    NodeOutcome.SUCCESS: NodeStatus.COMPLETED,
    NodeOutcome.CANCELLED: NodeStatus.CANCELLED,
    NodeOutcome.PARKED: NodeStatus.WAITING,
    NodeOutcome.FAILED: NodeStatus.FAILED,
    NodeOutcome.GAVE_UP: NodeStatus.FAILED,
}


def classify_error(error: BaseException) -> dict[str, Any]:
    """Describe an action failure as the payload of the ``error`` trigger.

    Timeouts are ``timeout``, action/provider failures ``llm_failure`` (both retryable);
    anything else is ``internal_error`` and not retryable. Callers never pass
    cancellation: it propagates instead of being classified.
    """
    if isinstance(error, TimeoutError):
        code, retryable = "timeout", True
    elif isinstance(error, PhasegraphError) and error.code.value == "loop_detected":
        code, retryable = "loop_detected", True
    elif isinstance(error, ActionError | OSError):
        code, retryable = "llm_failure", True
    else:
        code, retryable = "internal_error", False
    message = str(error) or type(error).__name__
    return {
        "error_code": code,
        "error_type": type(error).__name__,
        "message": message,
        "retryable": retryable,
    }


def run_status(prepared: PreparedGraph, nodes: Mapping[str, NodeState]) -> RunStatus:
    """The run status implied by its nodes."""
    pending = waiting = parked = False
    all_succeeded = True
    for node in nodes.values():
        if node.status is NodeStatus.RUNNING:
            return RunStatus.RUNNING
        pending |= node.status is NodeStatus.PENDING
        waiting |= node.status is NodeStatus.WAITING
        parked |= node.outcome is NodeOutcome.PARKED
        all_succeeded &= node.outcome is NodeOutcome.SUCCESS
    if pending and prepared.workflow.ready(nodes):
        return RunStatus.RUNNING
    if waiting:
        return RunStatus.PARKED if parked else RunStatus.WAITING
    return RunStatus.COMPLETED if all_succeeded else RunStatus.FAILED


class StepBuilder:
    """Builds the next record for a run of one prepared graph."""

    def __init__(self, prepared: PreparedGraph, clock: Clock) -> None:
        self._prepared = prepared
        self._clock = clock
        self._concurrency = prepared.definition.concurrency

    def start_next(self, state: RunState) -> StepRecord | None:
        """Start the first ready node if a concurrency slot is free."""
        running = sum(1 for n in state.nodes.values() if n.status is NodeStatus.RUNNING)
        if running >= self._concurrency:
            return None
        ready = self._prepared.workflow.ready(state.nodes)
        if not ready:
            return None
        node_id = ready[0]
        definition = self._prepared.workflow.nodes[node_id]
        try:
            step = self._prepared.machines.start(definition.machine, node_id, definition.settings)
        except BudgetExhaustedError as exc:
            return self.node_failed(state, node_id, exc, ())
        node = self._moved(NodeState(), step, steps=0)
        return self._record(state, node_id, node, kind="start", dest=step.position.path)

    def transition(
        self,
        state: RunState,
        node_id: str,
        result: ActionResult,
        events: tuple[Mapping[str, Any], ...],
    ) -> StepRecord:
        """Fire the trigger ``result`` names and merge its data.

        Raises:
            IllegalTriggerError: The trigger is not legal in the node's state.
            BudgetExhaustedError: The destination would exceed a budget.
            DataConflictError: The data update conflicts with another node's writes.
        """
        current = state.nodes[node_id]
        definition = self._prepared.workflow.nodes[node_id]
        step = self._prepared.machines.step(
            definition.machine,
            Position(path=current.path, counters=current.counters),
            result.trigger,
            node_id=node_id,
            settings=definition.settings,
            payload=result.payload,
        )
        data = self._merge(state, node_id, result.data)
        node = self._moved(current, step, steps=current.steps + 1)
        summary = {"trigger": result.trigger, "payload": result.payload, "output": result.output}
        return self._record(
            state,
            node_id,
            node,
            kind="transition",
            source=current.path,
            trigger=result.trigger,
            dest=step.position.path,
            result={k: v for k, v in summary.items() if v},
            data=data,
            events=events,
        )

    def action_failed(
        self,
        state: RunState,
        node_id: str,
        error: BaseException,
        events: tuple[Mapping[str, Any], ...],
    ) -> StepRecord:
        """Route a raised error to the state's ``error`` trigger, or fail the node."""
        node = state.nodes[node_id]
        root = self._prepared.workflow.nodes[node_id].machine
        if ERROR_TRIGGER in self._prepared.machines.legal_triggers(root, node.path):
            failure = ActionResult(trigger=ERROR_TRIGGER, payload=classify_error(error))
            try:
                return self.transition(state, node_id, failure, events)
            except RunError as exc:
                error = exc
        return self.node_failed(state, node_id, error, events)

    def node_failed(
        self,
        state: RunState,
        node_id: str,
        error: BaseException,
        events: tuple[Mapping[str, Any], ...],
        result: ActionResult | None = None,
    ) -> StepRecord:
        """Fail the node (nothing of its result is applied) and skip its dependents."""
        current = state.nodes[node_id]
        message = str(error) or type(error).__name__
        node = NodeState(
            status=NodeStatus.FAILED,
            path=current.path,
            outcome=NodeOutcome.FAILED,
            counters=current.counters,
            steps=current.steps,
            error=message,
        )
        summary = {"trigger": result.trigger} if result is not None else {}
        return self._record(
            state,
            node_id,
            node,
            kind="fail",
            source=current.path,
            trigger=result.trigger if result else None,
            dest=current.path,
            result={**summary, "error": classify_error(error)},
            events=events,
        )

    def settle(self, state: RunState) -> StepRecord | None:
        """Close a run in which nothing runs and nothing can start; None if not stuck."""
        status = run_status(self._prepared, state.nodes)
        if status is RunStatus.RUNNING or status is state.status:
            return None
        return StepRecord(seq=state.seq + 1, time=self._clock.now(), kind="status", status=status)

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def _moved(current: NodeState, step: StepResult, *, steps: int) -> NodeState:
        return NodeState(
            status=_STATUS_FOR_OUTCOME[step.outcome],
            path=step.position.path,
            outcome=step.outcome,
            counters=step.position.counters,
            steps=steps,
        )

    def _record(
        self,
        state: RunState,
        node_id: str,
        node: NodeState,
        *,
        kind: str,
        source: tuple[str, ...] = (),
        trigger: str | None = None,
        dest: tuple[str, ...] = (),
        result: Mapping[str, Any] = EMPTY,
        data: Mapping[str, Any] = EMPTY,
        events: tuple[Mapping[str, Any], ...] = (),
    ) -> StepRecord:
        time = self._clock.now()
        nodes = {node_id: node}
        errors: tuple[ErrorRecord, ...] = ()
        if node.status is NodeStatus.FAILED:
            nodes.update(self._skipped(state, node_id))
            message = node.error or f"finished with outcome {node.outcome}"
            errors = (
                ErrorRecord(
                    time=time,
                    node=node_id,
                    state=node.state,
                    message=message,
                    details=MappingProxyType({"outcome": str(node.outcome)}),
                ),
            )
        status = run_status(self._prepared, {**state.nodes, **nodes})
        return StepRecord(
            seq=state.seq + 1,
            time=time,
            kind=kind,
            node=node_id,
            source=source,
            trigger=trigger,
            dest=dest,
            result=MappingProxyType(dict(result)) if result else EMPTY,
            data=data,
            nodes=MappingProxyType(nodes),
            status=status,
            errors=errors,
            events=events,
        )

    def _skipped(self, state: RunState, failed: str) -> dict[str, NodeState]:
        return {
            node_id: NodeState(status=NodeStatus.SKIPPED, error=f"needs {failed!r}, which failed")
            for node_id in self._prepared.workflow.descendants[failed]
            if state.nodes[node_id].status is NodeStatus.PENDING
        }

    def _merge(self, state: RunState, node_id: str, update: Mapping[str, Any]) -> Mapping[str, Any]:
        if not update:
            return EMPTY
        definition = self._prepared.definition
        declared = self._prepared.workflow.nodes[node_id].writes
        merged: dict[str, Any] = {}
        for key, value in update.items():
            if declared is not None and key not in declared:
                raise DataConflictError(
                    f"node {node_id!r} wrote {key!r}, which is not in its writes "
                    f"({', '.join(declared) or 'none'})",
                    node_id=node_id,
                )
            reducer = definition.reducers.get(key)
            if reducer is None:
                self._check_conflict(state, node_id, key)
                merged[key] = value
            else:
                merged[key] = _reduce(reducer, state.data.get(key), value, key, node_id)
        return MappingProxyType(merged)

    def _check_conflict(self, state: RunState, node_id: str, key: str) -> None:
        workflow = self._prepared.workflow
        for other in state.writers.get(key, ()):
            if workflow.unordered(other, node_id):
                raise DataConflictError(
                    f"nodes {other!r} and {node_id!r} may run concurrently and both wrote "
                    f"{key!r}; order them with needs or declare a reducer for {key!r}",
                    node_id=node_id,
                )


def _reduce(reducer: str, old: Any, new: Any, key: str, node_id: str) -> Any:
    if reducer == "append":
        items = new if isinstance(new, list | tuple) else [new]
        return [*(old or []), *items]
    if not isinstance(new, Mapping) or not isinstance(old or {}, Mapping):
        raise DataConflictError(
            f"node {node_id!r}: key {key!r} has reducer 'merge' but the value is not a mapping",
            node_id=node_id,
        )
    return {**(old or {}), **new}
