"""Merge data updates per top-level key: declared writes, reducers and conflict detection.

Two nodes that may run concurrently writing the same key is an error unless the graph
declares a reducer for it, so a run's final data never depends on timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from phasegraph.core._writes import write_conflict
from phasegraph.errors import DataConflictError
from phasegraph.model import EMPTY, RunState
from phasegraph.run._prepare import PreparedGraph

__all__ = ["merge_update"]


def merge_update(
    prepared: PreparedGraph, state: RunState, node_id: str, update: Mapping[str, Any]
) -> Mapping[str, Any]:
    """Merge a node's data update per top-level key, applying reducers.

    Returns:
        The keys to set, with values after any reducer.

    Raises:
        DataConflictError: The node wrote a key it did not declare, or a key another node
            that may run concurrently also wrote (and no reducer is declared for it).
    """
    if not update:
        return EMPTY
    reducers = prepared.definition.reducers
    declared = prepared.workflow.nodes[node_id].writes
    merged: dict[str, Any] = {}
    for key, value in update.items():
        if declared is not None and key not in declared:
            raise DataConflictError(
                f"node {node_id!r} wrote {key!r}, which is not in its writes "
                f"({', '.join(declared) or 'none'})",
                node_id=node_id,
            )
        reducer = reducers.get(key)
        if reducer is None:
            _check_conflict(prepared, state, node_id, key)
            merged[key] = value
        else:
            merged[key] = _reduce(reducer, state.data.get(key), value, key, node_id)
    return MappingProxyType(merged)


def _check_conflict(prepared: PreparedGraph, state: RunState, node_id: str, key: str) -> None:
    last = state.writers.get(key, ())[-1:]
    conflict = write_conflict(prepared.workflow, last[0] if last else None, node_id, key)
    if conflict is not None:
        raise DataConflictError(conflict.message(), node_id=node_id)


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
