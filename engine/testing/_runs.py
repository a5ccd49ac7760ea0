"""One property example: run a scripted graph, check every step, resume, replay.

:func:`run_example` runs the real :class:`~phasegraph.Engine` on a memory store with the
scripted actions of :mod:`phasegraph.testing._outcomes` three ways: straight through
(checking each committed step), replayed from its record, and stopped after every step
and resumed from the stored snapshot. Any difference raises :class:`PropertyFailed`
naming the node and the path it took.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.analysis import Severity
from phasegraph.analysis._check import analyze_graph, analyze_machine, machine_family, step_bound
from phasegraph.api import Engine
from phasegraph.model import (
    EMPTY,
    PATH_SEPARATOR,
    GraphDef,
    MachineDef,
    NodeDef,
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
    nested_machines,
    replace,
)
from phasegraph.run import PreparedGraph, RunOptions, prepare
from phasegraph.spec import load_graph
from phasegraph.store.memory import MemoryStore
from phasegraph.testing._outcomes import Script, scripted_actions

__all__ = ["PropertyFailed", "Subject", "graph_subject", "machine_subject", "run_example"]

_RUN_ID = "property-run"


class PropertyFailed(AssertionError):
    """A generated property does not hold; the message names the node and its path.

    An ``AssertionError`` so that pytest and hypothesis report it as a test failure, and
    not a :class:`~phasegraph.errors.PhasegraphError`: it is the test kit's verdict on the
    user's definitions, raised only inside their tests, never by a run, the CLI or the
    server, so no error code, exit status or HTTP status applies to it.
    """


# --------------------------------------------------------------------------- subjects


@dataclass(frozen=True, slots=True)
class Subject:
    """A graph made ready for property runs, and what bounds it.

    Attributes:
        label: The definition as the user named it.
        definition: The graph with no middleware, no input schema and capped budgets.
        errors: ``phasegraph check`` errors of the original definition.
        bounds: Node id → the most steps its budgets allow.
    """

    label: str
    definition: GraphDef
    errors: tuple[str, ...]
    bounds: Mapping[str, int]

    @property
    def cap(self) -> int:
        """The most records a run can commit: creation, starts, steps and status changes."""
        return 1 + sum(bound + 1 for bound in self.bounds.values()) + 3


def _capped(node: NodeDef, machines: Mapping[str, MachineDef], cap: int | None) -> NodeDef:
    if cap is None:
        return node
    overrides = dict(node.settings.get("budgets") or {})
    for machine in nested_machines(node.machine, machines):
        for budget in machine.budgets.values():
            overrides[budget.name] = min(int(overrides.get(budget.name, budget.limit)), cap)
    settings = MappingProxyType({**node.settings, "budgets": overrides})
    return replace(node, settings=settings)


def _subject(label: str, definition: GraphDef, errors: list[str], cap: int | None) -> Subject:
    nodes = tuple(_capped(node, definition.machines, cap) for node in definition.nodes)
    ready = replace(definition, nodes=nodes, middleware=(), input_schema=None)
    bounds = {n.id: step_bound(n.machine, ready.machines, n.settings) for n in nodes}
    return Subject(label, ready, tuple(errors), MappingProxyType(bounds))


def graph_subject(source: str | Path, cap: int | None) -> Subject:
    """Load a graph for property runs (``cap`` lowers every budget limit to at most it)."""
    definition = load_graph(source)
    found = analyze_graph(definition)
    errors = [str(f) for f in found if f.severity is Severity.ERROR]
    return _subject(str(source), definition, errors, cap)


def machine_subject(source: str | Path, settings: Mapping[str, Any], cap: int | None) -> Subject:
    """Load a machine for property runs as a one-node graph whose node has ``settings``."""
    root, family = machine_family(source)
    found = analyze_machine(root.name, family)
    node = NodeDef(id=root.name, machine=root.name, settings=MappingProxyType(dict(settings)))
    definition = GraphDef(
        name=root.name,
        nodes=(node,),
        machines=MappingProxyType(family),
        location=root.location,
        digest=f"machine-properties:{root.name}",
    )
    errors = [str(f) for f in found if f.severity is Severity.ERROR]
    return _subject(str(source), definition, errors, cap)


# --------------------------------------------------------------------------- checks


class _FixedClock:
    """Every reading is the same instant, so two runs of one script commit equal records."""

    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


def _moves(records: Iterable[StepRecord], node_id: str) -> list[str]:
    moves = []
    for record in records:
        if record.node != node_id:
            continue
        if record.kind == "start":
            moves.append("/".join(record.dest))
        elif record.kind == "fail":
            moves.append(
                f"--{record.trigger}--> refused, node failed" if record.trigger else "(failed)"
            )
        elif record.trigger is not None:
            moves.append(f"--{record.trigger}--> {'/'.join(record.dest)}")
    return moves


def _path_text(records: Iterable[StepRecord], node_id: str, last: int = 16) -> str:
    moves = _moves(records, node_id)
    shown = moves if len(moves) <= last else ["...", *moves[-last:]]
    return " ".join(shown) or "(never started)"


def _fail(subject: Subject, node_id: str, records: list[StepRecord], what: str) -> PropertyFailed:
    return PropertyFailed(
        f"{subject.label}: node {node_id!r} {what}\n  its path: {_path_text(records, node_id)}"
    )


def _check_node(subject: Subject, node_id: str, node: NodeState, records: list[StepRecord]) -> None:
    """Declared states only, budgets within their limits, steps within the bound."""
    definition = subject.definition
    settings = next(n.settings for n in definition.nodes if n.id == node_id)
    machine = definition.machines[next(n.machine for n in definition.nodes if n.id == node_id)]
    levels: dict[str, MachineDef] = {"": machine}
    for depth, state in enumerate(node.path):
        declared = machine.states.get(state)
        if declared is None:
            raise _fail(subject, node_id, records, f"reached undeclared state {node.state!r}")
        if declared.machine is not None and depth + 1 < len(node.path):
            machine = definition.machines[declared.machine]
            levels[PATH_SEPARATOR.join(node.path[: depth + 1]) + PATH_SEPARATOR] = machine
    overrides = settings.get("budgets") or EMPTY
    for key, spent in node.counters.items():
        prefix, _, budget = key.rpartition(PATH_SEPARATOR)
        owner = levels.get(prefix + PATH_SEPARATOR if prefix else "")
        if owner is None or budget not in owner.budgets:
            continue  # a nested level the node has left; checked while it was there
        limit = int(overrides.get(budget, owner.budgets[budget].limit))
        if spent > limit:
            text = f"spent {spent} units of budget {key!r}, more than its limit {limit}"
            raise _fail(subject, node_id, records, text)
    if node.steps > subject.bounds[node_id]:
        text = (
            f"took {node.steps} steps, more than the {subject.bounds[node_id]} its budgets "
            "allow: a loop that no budget bounds? (run `phasegraph check`)"
        )
        raise _fail(subject, node_id, records, text)


def _check_finished(subject: Subject, state: RunState, records: list[StepRecord]) -> None:
    if state.status is RunStatus.RUNNING:
        busy = next(n for n, s in state.nodes.items() if s.status is NodeStatus.RUNNING)
        text = (
            f"did not reach a final state: the run was still going after {len(records)} "
            "steps, more than the budgets allow (a loop that no budget bounds?)"
        )
        raise _fail(subject, busy, records, text)
    for node_id, node in state.nodes.items():
        if node.error is not None and node.status is not NodeStatus.SKIPPED:
            text = f"failed in state {node.state!r} instead of reaching a final state: {node.error}"
            raise _fail(subject, node_id, records, text)


async def _drive(engine: Engine, prepared: PreparedGraph, subject: Subject) -> list[StepRecord]:
    records: list[StepRecord] = []
    async with engine.start(prepared, {}, run_id=_RUN_ID) as run:
        while len(records) < subject.cap:
            record = await run.next()
            if record is None:
                break
            records.append(record)
            for node_id, node in record.nodes.items():
                _check_node(subject, node_id, node, records)
        _check_finished(subject, run.state, records)
    return records


async def _drive_stopping(engine: Engine, prepared: PreparedGraph, cap: int) -> None:
    async with engine.start(prepared, {}, run_id=_RUN_ID):
        pass
    for _ in range(cap):
        # A new Run from the stored snapshot for every step, as after a crash.
        async with engine.open(_RUN_ID, graph=prepared) as run:
            if await run.next() is None:
                return


def _same_ending(
    subject: Subject,
    straight: RunState,
    resumed: RunState,
    records: list[StepRecord],
    again: list[StepRecord],
) -> None:
    for node_id, node in straight.nodes.items():
        other = resumed.nodes[node_id]
        if node != other or _moves(records, node_id) != _moves(again, node_id):
            text = (
                "ended differently when the run was stopped after every step and resumed "
                f"from its snapshot:\n  without stopping: {node.status} in {node.state!r}\n"
                f"  resumed: {other.status} in {other.state!r}: {_path_text(again, node_id)}"
            )
            raise _fail(subject, node_id, records, text)
    if straight.status is not resumed.status:
        raise PropertyFailed(
            f"{subject.label}: the run ended {straight.status} without stopping but "
            f"{resumed.status} when stopped after every step and resumed"
        )


async def run_example(subject: Subject, script: Script, checkpoint_every: int) -> None:
    """Run one example: straight through, replayed, and stopped and resumed at every step.

    Raises:
        PropertyFailed: A property does not hold for ``script``.
    """
    actions = scripted_actions(subject.definition, script)
    prepared = prepare(subject.definition, subject.label, actions)
    options = RunOptions(checkpoint_every=checkpoint_every, owner="phasegraph.testing._contract")
    async with MemoryStore() as store:
        engine = Engine(store, options=options, clock=_FixedClock())
        records = await _drive(engine, prepared, subject)
        straight = await engine.get(_RUN_ID)
        report = await engine.replay(_RUN_ID, graph=prepared)
    if report.divergence is not None:
        node = report.divergence.node or "-"
        raise _fail(
            subject,
            node,
            records,
            f"replays differently: {report.divergence.reason} (step {report.divergence.seq})",
        )
    async with MemoryStore() as store:
        engine = Engine(store, options=options, clock=_FixedClock())
        await _drive_stopping(engine, prepared, subject.cap)
        resumed = await engine.get(_RUN_ID)
        again = await engine.history(_RUN_ID)
    _same_ending(subject, straight, resumed, records, again)
