"""Every JSON shape of phasegraph's output: ``--json`` on the command line and the HTTP API.

One function per shape, and both surfaces call it, so ``phasegraph status RUN --json`` and
``GET /runs/RUN`` give the same JSON for the same run. ``specs/openapi.yaml`` describes
each shape under ``components/schemas`` (named beside each function here).

A run's history is the one shape rendered elsewhere: straight from the stored record
bodies, by :func:`phasegraph.codec.history_json` (``StepRecord``), because a history is
thousands of records and building each as a model value first costs several times more
(see ``docs/internals.md``, "JSON shapes").

Timestamps are ISO 8601 in UTC with ``+00:00`` everywhere, e.g.
``2026-11-26T04:02:00.123456+00:00``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import MappingProxyType, NoneType
from typing import Any, Final, Protocol

from phasegraph.errors import Problem
from phasegraph.model import (
    ActionDef,
    GraphDef,
    Interrupt,
    MachineDef,
    NodeOutcome,
    NodeStatus,
    Plan,
    RunState,
    Value,
    child_id,
)

__all__: list[str] = []  # the shapes serve the CLI and the server; users read JSON


_PLAIN: Final = frozenset({str, int, float, bool, NoneType})
_MAPS: Final = frozenset({dict, MappingProxyType})
_NO_OFFSET: Final = timedelta(0)


def iso_time(value: datetime) -> str:
    """A timestamp as ISO 8601 in UTC (``...+00:00``), whatever zone it was made in."""
    if value.utcoffset() != _NO_OFFSET:
        value = value.astimezone(UTC)
    return value.isoformat()


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
        return iso_time(value)
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
    superseded = superseded_children(state)
    for node_id, node in state.nodes.items():
        if node_id not in superseded:
            counts[node.status] += 1
    total = len(state.nodes) - len(superseded)
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
    if superseded:
        parts.append(f"{len(superseded)} superseded by a later plan")
    return ", ".join(parts)


def superseded_children(state: RunState) -> frozenset[str]:
    """Children that an earlier version of their parent's plan made and a later one dropped.

    They stay in the run (their steps are history) but no longer count: their parent's
    plan stands for them.
    """
    if not state.plans:
        return frozenset()
    return frozenset(
        child_id(parent, item.id)
        for parent, plan in state.plans.items()
        for item in plan.items
        if item.id not in plan.members
    )


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


def errors_view(state: RunState, node: str | None = None) -> dict[str, Any]:
    """``ErrorLog``: the run's error log (optionally one node's) with its summary line."""
    return {
        "run_id": state.run_id,
        "summary": run_summary(state),
        "errors": error_rows(state, node),
    }


def state_view(state: RunState) -> dict[str, Any]:
    """``Snapshot``: the whole run state as JSON, with a one-line summary."""
    view: dict[str, Any] = jsonable(state)
    view["summary"] = run_summary(state)
    return view


def run_view(
    state: RunState,
    *,
    driving: bool,
    answers: Mapping[str, Sequence[str]],
    budget: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``RunView``: a run at a glance: status, nodes' machine states, pending interrupts.

    Args:
        state: The run.
        driving: Whether the run is being stepped now (by the server that answers, over
            HTTP; by any live process, on the command line).
        answers: Interrupt id → the triggers a reply may fire on it; each pending
            interrupt shows its own (an empty list when the graph could not be read).
        budget: The run's budget for model calls as it stands (``RunBudget``, see
            :func:`phasegraph.run._spend.budget_view`); ``None``: none set, nothing spent.
    """
    return {
        "run_id": state.run_id,
        "graph": state.graph,
        "graph_digest": state.graph_digest,
        "status": state.status.value,
        "seq": state.seq,
        "summary": run_summary(state),
        "created_at": iso_time(state.created_at),
        "updated_at": iso_time(state.updated_at),
        "nodes": {
            node_id: {
                "status": node.status.value,
                "state": node.state,
                "path": list(node.path),
                "outcome": None if node.outcome is None else node.outcome.value,
                "steps": node.steps,
                "counters": dict(node.counters),
                "error": node.error,
            }
            for node_id, node in state.nodes.items()
        },
        "interrupts": [
            _interrupt_view(interrupt, answers.get(interrupt_id, ()))
            for interrupt_id, interrupt in sorted(state.interrupts.items())
        ],
        "error_count": len(state.errors),
        "driving": driving,
        "budget": None if budget is None else dict(budget),
    }


def _interrupt_view(interrupt: Interrupt, answers: Sequence[str]) -> dict[str, Any]:
    view: dict[str, Any] = jsonable(interrupt)
    view["answers"] = list(answers)
    return view


class ListedRun(Protocol):
    """A run as a store lists it (:class:`phasegraph.store.RunMeta`)."""

    @property
    def run_id(self) -> str: ...
    @property
    def graph(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def created_at(self) -> float: ...
    @property
    def updated_at(self) -> float: ...
    @property
    def unreadable(self) -> str | None: ...


def meta_view(meta: ListedRun) -> dict[str, Any]:
    """``RunMeta`` (or ``UnreadableRun``): a listed run, with ISO times."""
    if meta.unreadable is not None:
        return {"run_id": meta.run_id, "unreadable": meta.unreadable}
    return {
        "run_id": meta.run_id,
        "graph": meta.graph,
        "status": str(meta.status),
        "seq": meta.seq,
        "created_at": iso_time(datetime.fromtimestamp(meta.created_at, UTC)),
        "updated_at": iso_time(datetime.fromtimestamp(meta.updated_at, UTC)),
    }


def graph_view(
    definition: GraphDef,
    layers: Sequence[Sequence[str]],
    plans: Mapping[str, Plan] | None = None,
) -> dict[str, Any]:
    """``GraphShape`` without the run's fields: layers, nodes and machines of a graph.

    A run's graph is drawn as it stands: ``definition`` and ``layers`` hold the children
    its plans made so far (:func:`phasegraph.run._prepare.with_plans`), each naming its
    ``parent``, and each node with a plan shows its current version. It never shows how
    actions are configured (commands, URLs, templates) nor what a plan's items hold: only
    each hook's action kind and the triggers it declares.

    Args:
        definition: The graph (with the children of ``plans`` among its nodes).
        layers: Its topological generations.
        plans: Node id → its current plan (a run's
            :attr:`~phasegraph.model.RunState.plans`).
    """
    plans = plans or {}
    return {
        "graph": definition.name,
        "description": definition.description,
        "digest": definition.digest,
        "layers": [list(layer) for layer in layers],
        "nodes": {
            node.id: {
                "machine": node.machine,
                "needs": list(node.needs),
                "hooks": {hook: _hook_view(action) for hook, action in node.bind.items()},
                "parent": node.parent,
                "plan": _plan_view(node.id, plans.get(node.id)),
            }
            for node in definition.nodes
        },
        "machines": {name: _machine_view(m) for name, m in definition.machines.items()},
    }


class _Migration(Protocol):
    """What :func:`migration_view` reads of a :class:`~phasegraph.run.Migration`."""

    @property
    def run_id(self) -> str: ...
    @property
    def from_digest(self) -> str: ...
    @property
    def to_digest(self) -> str: ...
    @property
    def fits(self) -> bool: ...
    @property
    def applied(self) -> bool: ...
    @property
    def seq(self) -> int: ...
    @property
    def problems(self) -> tuple[Problem, ...]: ...


def migration_view(migration: _Migration) -> dict[str, Any]:
    """A migration, checked or made, as ``migrate --json`` and the HTTP API show it."""
    return {
        "run_id": migration.run_id,
        "from": migration.from_digest,
        "to": migration.to_digest,
        "fits": migration.fits,
        "applied": migration.applied,
        "seq": migration.seq,
        "problems": [
            {"message": problem.message, "location": str(problem.location or "")}
            for problem in migration.problems
        ],
    }


def _hook_view(action: ActionDef) -> dict[str, Any]:
    """A binding as the graph's shape shows it: its kind, triggers and, for a model, prompts."""
    view: dict[str, Any] = {"kind": action.kind, "triggers": list(action.triggers)}
    llm = action.config.get("llm") if action.kind == "llm" else None
    if isinstance(llm, Mapping):
        view.update({key: str(llm[key]) for key in ("system", "prompt") if llm.get(key)})
    return view


def _plan_view(parent: str, plan: Plan | None) -> dict[str, Any] | None:
    """A node's current plan as the graph's shape shows it: which children count now.

    Its members are node ids (``PARENT.ITEM``), like every other id of the shape.
    """
    if plan is None:
        return None
    return {
        "hook": plan.hook,
        "version": plan.version,
        "members": [child_id(parent, item) for item in plan.members],
        "limit": plan.limit,
    }


def _machine_view(machine: MachineDef) -> dict[str, Any]:
    return {
        "initial": machine.initial,
        "description": machine.description,
        "states": [
            {
                "name": state.name,
                "final": None if state.final is None else state.final.value,
                "hook": state.hook,
                "machine": state.machine,
                "description": state.description,
            }
            for state in machine.states.values()
        ],
        "transitions": [
            {
                "trigger": transition.trigger,
                "source": list(transition.source),
                "dest": transition.dest,
                "conditions": list(transition.conditions),
                "unless": list(transition.unless),
            }
            for transition in machine.transitions
        ],
    }
