"""JSON views of run state, step records and run metadata (for ``--json`` and HTTP)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any

from phasegraph.model import NodeOutcome, NodeStatus, RunState, StepRecord

__all__ = [
    "error_rows",
    "jsonable",
    "record_view",
    "recovered_nodes",
    "run_summary",
    "state_view",
]


def jsonable(value: Any) -> Any:
    """Convert model values (frozen dataclasses, mappings, tuples, datetimes) to JSON types."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


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
    """A step record as JSON."""
    view: dict[str, Any] = jsonable(record)
    return view
