"""JSON views of run state, step records and run metadata (for ``--json`` and HTTP)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from types import MappingProxyType, NoneType
from typing import Any, Final

from phasegraph.model import NodeOutcome, NodeState, NodeStatus, RunState, StepRecord, Value

__all__ = [
    "error_rows",
    "jsonable",
    "record_view",
    "recovered_nodes",
    "run_summary",
    "state_view",
]


_PLAIN: Final = frozenset({str, int, float, bool, NoneType})
_MAPS: Final = frozenset({dict, MappingProxyType})


def jsonable(value: Any) -> Any:
    """Convert model values (frozen values, mappings, tuples, datetimes) to JSON types."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind in _MAPS:
        if not value:
            return {}
        # The usual map of run data: str keys and plain values, taken as they are.
        if _PLAIN.issuperset(map(type, value.values())) and all(type(k) is str for k in value):
            return dict(value)
        return {str(k): jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        if _PLAIN.issuperset(map(type, value)):
            return list(value)
        return [jsonable(v) for v in value]
    names = _dataclass_fields(kind)  # type: ignore[arg-type]  # a type is hashable
    if names is not None:
        return {name: jsonable(getattr(value, name)) for name in names}
    return _other(value)


def _other(value: Any) -> Any:
    """:func:`jsonable` of anything but the common types it handles itself."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


@functools.cache
def _dataclass_fields(kind: type) -> tuple[str, ...] | None:
    """The field names of a value type (a :class:`~phasegraph.model.Value` or a dataclass)."""
    if issubclass(kind, Value):
        return kind.__struct_fields__
    if dataclasses.is_dataclass(kind):
        return tuple(field.name for field in dataclasses.fields(kind))
    return None


def run_summary(state: RunState) -> str:
    """One line: ``9/9 nodes succeeded, 1 recovered`` or ``3/4 nodes succeeded, 1 failed``.

    A node counts as recovered when it completed successfully although the error log
    holds records for it (a failure it overcame: a retry, a reflection, a handled error).
    """
    counts = {status: 0 for status in NodeStatus}
    for node in state.nodes.values():
        counts[node.status] += 1
    total = len(state.nodes)
    parts = [f"{counts[NodeStatus.COMPLETED]}/{total} nodes succeeded"]
    recovered = len(recovered_nodes(state))
    if recovered:
        parts.append(f"{recovered} recovered")
    parts += [
        f"{counts[s]} {s.value}"
        for s in (
            NodeStatus.FAILED,
            NodeStatus.SKIPPED,
            NodeStatus.WAITING,
            NodeStatus.RUNNING,
            NodeStatus.PENDING,
            NodeStatus.CANCELLED,
        )
        if counts[s]
    ]
    return ", ".join(parts)


def recovered_nodes(state: RunState) -> frozenset[str]:
    """Nodes that completed successfully and have records in the error log."""
    logged = {record.node for record in state.errors}
    return frozenset(
        node_id
        for node_id in logged
        if (node := state.nodes.get(node_id)) is not None
        and node.status is NodeStatus.COMPLETED
        and node.outcome is NodeOutcome.SUCCESS
    )


def error_rows(state: RunState, node: str | None = None) -> list[dict[str, Any]]:
    """The run's error log as JSON rows (oldest first), optionally for one node."""
    overcome = recovered_nodes(state)
    return [
        {**jsonable(record), "recovered": record.recovered or record.node in overcome}
        for record in state.errors
        if node is None or record.node == node
    ]


def state_view(state: RunState) -> dict[str, Any]:
    """The run state as JSON, with a one-line summary."""
    view: dict[str, Any] = jsonable(state)
    view["summary"] = run_summary(state)
    return view


def record_view(record: StepRecord) -> dict[str, Any]:
    """A step record as JSON: what :func:`jsonable` gives, built field by field.

    A history of thousands of records is rendered at once, so this is the fast way.
    """
    interrupts = record.interrupts
    return {
        "seq": record.seq,
        "time": record.time.isoformat(),
        "kind": record.kind,
        "node": record.node,
        "source": list(record.source),
        "trigger": record.trigger,
        "dest": list(record.dest),
        "result": jsonable(record.result),
        "data": jsonable(record.data),
        "appended": jsonable(record.appended),
        "nodes": {node_id: _node_view(node) for node_id, node in record.nodes.items()},
        "status": record.status.value,
        "errors": [jsonable(error) for error in record.errors] if record.errors else [],
        "interrupts": None if interrupts is None else jsonable(interrupts),
        "events": [jsonable(event) for event in record.events] if record.events else [],
    }


def _node_view(node: NodeState) -> dict[str, Any]:
    return {
        "status": node.status.value,
        "path": list(node.path),
        "outcome": None if node.outcome is None else node.outcome.value,
        "counters": dict(node.counters),
        "steps": node.steps,
        "error": node.error,
        "payload": jsonable(node.payload),
    }
