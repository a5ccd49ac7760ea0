"""The wire layout: one msgspec ``Struct`` per table of ``specs/snapshot-format.md``.

Each struct mirrors one table of the spec: its fields are the model's attribute names,
written under the short wire keys (``field(name=...)``), in wire-key order. msgspec
checks the layout on decode (every key present, no unknown key, every value of its
type); this module converts between the structs and the frozen :mod:`phasegraph.model`
values, and adds what msgspec does not check: user data against the type table
(:mod:`phasegraph.codec._values`) and timestamps. Timestamps are typed ``Any`` on
purpose: a ``datetime`` field would also accept an RFC 3339 string, which the format
does not allow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, TypeVar

from msgspec import UNSET, Struct, UnsetType, field
from msgspec.structs import replace

from phasegraph import model
from phasegraph.codec._values import (
    Unencodable,
    aware,
    check_plain,
    plain_map,
    plain_value,
    type_name,
)
from phasegraph.errors import CodecError

__all__ = [
    "Actor",
    "Error",
    "Interrupt",
    "Ledger",
    "Node",
    "Plan",
    "PlanItem",
    "Record",
    "Segment",
    "Snapshot",
    "check_record",
    "record_wire",
    "run_state",
    "snapshot_wire",
    "step_record",
]

_T = TypeVar("_T")
_W = TypeVar("_W")


class Wire(Struct, forbid_unknown_fields=True, gc=False):
    """A map of the format; ``what`` is its name in error messages (``node.steps``).

    Untracked by the garbage collector: decoded bytes cannot hold a reference cycle, and a
    history read decodes thousands (about 9% fewer instructions per read).
    """

    @classmethod
    def what(cls) -> str:
        """The name of this map in messages: the class name in lower case."""
        return cls.__name__.lower()


class Ledger(Wire):
    """A :class:`~phasegraph.model.LedgerEntry` (spec: *Ledger entry*)."""

    arguments: dict[str, Any] = field(name="a")
    effect: model.Effect = field(name="ef")
    index: int = field(name="i")
    id: str = field(name="id")
    result: dict[str, Any] | None = field(name="r")
    tool: str = field(name="t")
    on_unknown: model.OnUnknown = field(name="u")


class Node(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.NodeState` (spec: *Node state*).

    Since format 5 a field that is empty or nil is not written (see :class:`Record`).
    """

    counters: dict[str, int] | UnsetType = field(name="c", default=UNSET)
    error: str | None = field(name="e", default=None)
    ledger: tuple[Ledger, ...] = field(name="l", default=())
    steps: int = field(name="n")
    outcome: model.NodeOutcome | None = field(name="o", default=None)
    path: tuple[str, ...] = field(name="p")
    payload: dict[str, Any] | UnsetType = field(name="pl", default=UNSET)
    result: Any = field(name="r", default=None)  # user data (format 6): a plan child's result
    retried: int | None = field(name="rt", default=None)  # format 8
    status: model.NodeStatus = field(name="s")


class Interrupt(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.Interrupt` (spec: *Interrupt*).

    ``reviewers`` and ``seq`` (format 4) are written only when set, so a gate that
    names no reviewers costs no more bytes than before.
    """

    created_at: Any = field(name="ca")  # timestamp or nil
    deadline: Any = field(name="dl")  # timestamp or nil
    id: str = field(name="id")
    kind: str = field(name="k")
    node: str = field(name="n")
    payload: dict[str, Any] = field(name="p")
    parked: bool = field(name="pk")
    seq: int = field(name="q", default=0)
    reviewers: list[str] = field(name="rv", default_factory=list)


class PlanItem(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.PlanItem` (spec: *Plan item*, format 6)."""

    id: str = field(name="id")
    needs: tuple[str, ...] = field(name="n", default=())
    value: Any = field(name="v", default=None)  # user data: the item as the plan gave it
    version: int = field(name="vr", default=1)


class Plan(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.Plan` (spec: *Plan*, format 6)."""

    hook: str = field(name="h")
    items: tuple[PlanItem, ...] = field(name="i", default=())
    limit: int = field(name="l", default=0)
    members: tuple[str, ...] = field(name="m", default=())
    version: int = field(name="v", default=1)


class Actor(Wire):
    """An :class:`~phasegraph.model.Actor` (spec: *Actor*)."""

    groups: list[str] = field(name="g")
    name: str = field(name="n")


class Error(Wire):
    """An :class:`~phasegraph.model.ErrorRecord` (spec: *Error record*)."""

    message: str = field(name="m")
    node: str = field(name="n")
    recovered: bool = field(name="r")
    state: str = field(name="s")
    severity: str = field(name="sv")
    time: Any = field(name="t")  # timestamp
    details: dict[str, Any] = field(name="x")


class Segment(Wire):
    """A long list of run data, kept in pieces (spec: *List segments*).

    ``refs`` names the earlier snapshots whose segment of the same key holds the list's
    first items, in order, with their item counts; ``items`` are the items after them.
    """

    items: list[Any] = field(name="i")
    refs: list[tuple[int, int]] = field(name="r")


class Snapshot(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.RunState` (spec: *Snapshot body*).

    ``lists`` is the one field the model does not have: data keys whose long list is
    kept in segments shared with earlier snapshots (missing from ``data``). ``plans``
    (format 6) is written only when a node has one; ``definition`` (format 7) only when
    the run is pinned to a stored definition.
    """

    created_at: Any = field(name="ca")  # timestamp
    data: dict[str, Any] = field(name="d")
    definition: str = field(name="df", default="")
    errors: tuple[Error, ...] = field(name="e")
    graph: str = field(name="g")
    graph_digest: str = field(name="gd")
    graph_source: str = field(name="gs")
    interrupts: dict[str, Interrupt] = field(name="i")
    run_id: str = field(name="id")
    input: dict[str, Any] = field(name="in")
    lists: dict[str, Segment] = field(name="ls")
    nodes: dict[str, Node] = field(name="ns")
    plans: dict[str, Plan] = field(name="pn", default_factory=dict)
    seq: int = field(name="q")
    status: model.RunStatus = field(name="s")
    updated_at: Any = field(name="ua")  # timestamp
    writers: dict[str, tuple[str, ...]] = field(name="w")


class Record(Wire, omit_defaults=True, kw_only=True):
    """A :class:`~phasegraph.model.StepRecord` (spec: *Step record body*).

    Since format 5 a field that is empty or nil is not written, and reads as its
    default: a history is read by the thousand, and each key left out is a value
    neither written nor decoded (a format-4 body, which has every key, reads as it is).
    A missing list reads as the shared ``()``, a missing map as ``UNSET`` (falsy, like
    the empty map it stands for; nil is not a map, and still refused). ``interrupts`` is
    the exception: nil (unchanged) is left out, but an empty map (every gate closed)
    means something else and is written.
    """

    appended: dict[str, list[Any]] | UnsetType = field(name="a", default=UNSET)
    actor: Actor | None = field(name="ac", default=None)
    data: dict[str, Any] | UnsetType = field(name="d", default=UNSET)
    dest: tuple[str, ...] = field(name="dst", default=())
    errors: tuple[Error, ...] = field(name="e", default=())
    events: tuple[dict[str, Any], ...] = field(name="ev", default=())
    interrupts: dict[str, Interrupt] | None = field(name="i", default=None)
    kind: str = field(name="k")
    ledger: Ledger | None = field(name="l", default=None)
    node: str | None = field(name="n", default=None)
    nodes: dict[str, Node] | UnsetType = field(name="ns", default=UNSET)
    plan: Plan | None = field(name="pn", default=None)
    seq: int = field(name="q")
    result: dict[str, Any] | UnsetType = field(name="r", default=UNSET)
    status: model.RunStatus = field(name="s")
    source: tuple[str, ...] = field(name="src", default=())
    time: Any = field(name="t")  # timestamp
    trigger: str | None = field(name="tr", default=None)


# --------------------------------------------------------------------------- model → wire
# Fields the model types precisely (ids, seqs, enums, paths, counters) are trusted
# (``mypy --strict`` checks the callers); user data and datetimes are checked. An
# Unencodable collects the path to the bad value on its way out.


def _user(value: Mapping[str, Any], label: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        return plain_map(value, 0)
    except Unencodable as exc:
        exc.path.append(label)
        raise


def _map(items: Mapping[str, _T], wire: Callable[[_T], _W], label: str) -> dict[str, _W]:
    out = {}
    for key, item in items.items():
        try:
            out[key] = wire(item)
        except Unencodable as exc:
            exc.path.append(f"{label}[{key!r}]")
            raise
    return out


def _list(items: tuple[_T, ...], wire: Callable[[_T], _W], label: str) -> tuple[_W, ...]:
    out = []
    for index, item in enumerate(items):
        try:
            out.append(wire(item))
        except Unencodable as exc:
            exc.path.append(f"{label}[{index}]")
            raise
    return tuple(out)


def _time(value: datetime | None, label: str) -> datetime | None:
    return None if value is None else aware(value, label)


def _ledger_wire(entry: model.LedgerEntry) -> Ledger:
    result = entry.result
    return Ledger(
        arguments=_user(entry.arguments, ".arguments"),
        effect=entry.effect,
        index=entry.index,
        id=entry.id,
        result=None if result is None else _user(result, ".result"),
        tool=entry.tool,
        on_unknown=entry.on_unknown,
    )


def _node_wire(node: model.NodeState) -> Node:
    counters, result = node.counters, node.result
    return Node(
        counters=dict(counters) if counters else UNSET,
        error=node.error,
        ledger=_list(node.ledger, _ledger_wire, ".ledger") if node.ledger else (),
        steps=node.steps,
        outcome=node.outcome,
        path=node.path,
        payload=_user(node.payload, ".payload") if node.payload else UNSET,
        result=None if result is None else _value(result, ".result"),
        retried=node.retried,
        status=node.status,
    )


def _value(value: Any, label: str) -> Any:
    """A user value of any type the type table has (not only a map)."""
    try:
        return plain_value(value, 0)
    except Unencodable as exc:
        exc.path.append(label)
        raise


def _item_wire(item: model.PlanItem) -> PlanItem:
    return PlanItem(
        id=item.id,
        needs=item.needs,
        value=None if item.value is None else _value(item.value, ".value"),
        version=item.version,
    )


def plan_wire(plan: model.Plan) -> Plan:
    """The wire form of a plan.

    Raises:
        Unencodable: An item's value is outside the type table.
    """
    return Plan(
        hook=plan.hook,
        items=_list(plan.items, _item_wire, ".items"),
        limit=plan.limit,
        members=plan.members,
        version=plan.version,
    )


def node_map_wire(nodes: Mapping[str, model.NodeState]) -> dict[str, Node]:
    """The wire form of (part of) a node map.

    Raises:
        Unencodable: A node's payload is outside the type table.
    """
    return _map(nodes, _node_wire, ".nodes")


def _interrupt_wire(item: model.Interrupt) -> Interrupt:
    return Interrupt(
        created_at=_time(item.created_at, ".created_at"),
        deadline=_time(item.deadline, ".deadline"),
        id=item.id,
        kind=item.kind,
        node=item.node,
        payload=_user(item.payload, ".payload"),
        parked=item.parked,
        seq=item.seq,
        reviewers=list(item.reviewers),
    )


def _actor_wire(actor: model.Actor) -> Actor:
    return Actor(groups=list(actor.groups), name=actor.name)


def _error_wire(error: model.ErrorRecord) -> Error:
    return Error(
        message=error.message,
        node=error.node,
        recovered=error.recovered,
        state=error.state,
        severity=error.severity,
        time=aware(error.time, ".time"),
        details=_user(error.details, ".details"),
    )


def snapshot_wire(
    state: model.RunState,
    nodes: Any = None,
    data: Mapping[str, Any] | None = None,
    lists: dict[str, Segment] | None = None,
) -> Snapshot:
    """The wire form of a run state.

    Args:
        state: The run state.
        nodes: The node map already encoded (a ``msgspec.Raw``), or ``None`` to encode it.
        data: The data keys to write plainly (default: all of ``state.data``).
        lists: The data keys written as segments (see :class:`Segment`).

    Raises:
        Unencodable: A user value is outside the type table or a datetime is naive.
    """
    return Snapshot(
        created_at=aware(state.created_at, ".created_at"),
        data=_user(state.data if data is None else data, ".data"),
        definition=state.definition,
        errors=_list(state.errors, _error_wire, ".errors"),
        graph=state.graph,
        graph_digest=state.graph_digest,
        graph_source=state.graph_source,
        interrupts=_map(state.interrupts, _interrupt_wire, ".interrupts"),
        run_id=state.run_id,
        input=_user(state.input, ".input"),
        lists=lists or {},
        nodes=_map(state.nodes, _node_wire, ".nodes") if nodes is None else nodes,
        plans=_map(state.plans, plan_wire, ".plans") if state.plans else {},
        seq=state.seq,
        status=state.status,
        updated_at=aware(state.updated_at, ".updated_at"),
        writers=dict(state.writers),
    )


def record_wire(record: model.StepRecord) -> Record:
    """The wire form of a step record (once per step: the hot path).

    Raises:
        Unencodable: A user value is outside the type table or a datetime is naive.
    """
    appended, data, result = record.appended, record.data, record.result
    # Twelve keywords, as in step_record: the fields most steps leave empty are set by
    # a second call, only when one is not.
    wire = Record(
        appended=_appended(appended) if appended else UNSET,
        data=_user(data, ".data") if data else UNSET,
        dest=record.dest,
        kind=record.kind,
        node=record.node,
        nodes=_map(record.nodes, _node_wire, ".nodes") if record.nodes else UNSET,
        seq=record.seq,
        result=_user(result, ".result") if result else UNSET,
        status=record.status,
        source=record.source,
        time=aware(record.time, ".time"),
        trigger=record.trigger,
    )
    if (
        record.errors
        or record.events
        or record.interrupts is not None
        or record.ledger is not None
        or record.actor is not None
        or record.plan is not None
    ):
        return replace(wire, **_logged_wire(record))
    return wire


def _logged_wire(record: model.StepRecord) -> dict[str, Any]:
    """The wire form of the fields of a record that most steps leave empty."""
    interrupts, ledger, actor, plan = record.interrupts, record.ledger, record.actor, record.plan
    return {
        "plan": None if plan is None else plan_wire(plan),
        "errors": _list(record.errors, _error_wire, ".errors") if record.errors else (),
        "events": _list(record.events, _event_wire, ".events") if record.events else (),
        "interrupts": (
            None if interrupts is None else _map(interrupts, _interrupt_wire, ".interrupts")
        ),
        "ledger": None if ledger is None else _ledger_wire(ledger),
        "actor": None if actor is None else _actor_wire(actor),
    }


def _appended(appended: Mapping[str, list[Any]]) -> dict[str, Any]:
    out = _user(appended, ".appended")
    for key, items in out.items():
        if not isinstance(items, list | tuple):
            exc = Unencodable(f"appended items must be a list, not {type_name(items)}")
            exc.path.append(f".appended[{key!r}]")
            raise exc
    return out


def _event_wire(event: Mapping[str, Any]) -> dict[str, Any]:
    return _user(event, "")


# --------------------------------------------------------------------------- wire → model
# msgspec has checked the layout; what is left is user data and timestamps. The label
# names the field in messages (``record.data``).

_CONTAINERS: Final = frozenset({dict, list})
_EMPTY: Final = model.EMPTY


def _frozen(value: dict[str, Any], label: str) -> Mapping[str, Any]:
    """A user-data map from the wire, checked, as a read-only view (no copy: it is ours)."""
    if not value:
        return _EMPTY
    if not _CONTAINERS.isdisjoint(map(type, value.values())):  # nested: check it all
        check_plain(value, 0, label)
    return MappingProxyType(value)


def _view(value: dict[str, Any]) -> Mapping[str, Any]:
    """A map of engine values (already typed by msgspec) as a read-only view."""
    return MappingProxyType(value) if value else _EMPTY


def _when(value: Any, label: str) -> datetime:
    if type(value) is not datetime:
        raise CodecError(f"{label} must be of type datetime, not {type_name(value)}")
    return value


def _when_or_none(value: Any, label: str) -> datetime | None:
    if value is not None and type(value) is not datetime:
        raise CodecError(f"{label} must be of type datetime or nil, not {type_name(value)}")
    return value


def _ledger(wire: Ledger) -> model.LedgerEntry:
    result = wire.result
    return model.LedgerEntry(
        id=wire.id,
        index=wire.index,
        tool=wire.tool,
        arguments=_frozen(wire.arguments, "ledger.arguments"),
        effect=wire.effect,
        on_unknown=wire.on_unknown,
        result=None if result is None else _frozen(result, "ledger.result"),
    )


def _node_state(wire: Node) -> model.NodeState:
    counters, payload, ledger, result = wire.counters, wire.payload, wire.ledger, wire.result
    return model.NodeState(
        status=wire.status,
        path=wire.path,
        outcome=wire.outcome,
        counters=MappingProxyType(counters) if counters else _EMPTY,
        steps=wire.steps,
        error=wire.error,
        payload=_frozen(payload, "node.payload") if payload else _EMPTY,
        ledger=tuple(map(_ledger, ledger)) if ledger else (),
        result=None if result is None else _checked(result, "node.result"),
        retried=wire.retried,
    )


def _checked(value: Any, label: str) -> Any:
    """A user value of any type from the wire, checked against the type table."""
    check_plain({"value": value}, 0, label)
    return value


def _plan_item(wire: PlanItem) -> model.PlanItem:
    value = wire.value
    return model.PlanItem(
        id=wire.id,
        needs=wire.needs,
        value=None if value is None else _checked(value, "plan.items.value"),
        version=wire.version,
    )


def _plan(wire: Plan) -> model.Plan:
    return model.Plan(
        hook=wire.hook,
        version=wire.version,
        items=tuple(map(_plan_item, wire.items)),
        members=wire.members,
        limit=wire.limit,
    )


def _nodes(nodes: dict[str, Node] | UnsetType) -> Mapping[str, model.NodeState]:
    if not nodes:
        return _EMPTY
    if len(nodes) == 1:  # the usual record: one node moved
        for key, node in nodes.items():
            return MappingProxyType({key: _node_state(node)})
    # zip/map rather than a comprehension: no extra frame per record (Python 3.11).
    return MappingProxyType(dict(zip(nodes, map(_node_state, nodes.values()), strict=True)))


def _interrupt(wire: Interrupt) -> model.Interrupt:
    return model.Interrupt(
        id=wire.id,
        node=wire.node,
        kind=wire.kind,
        payload=_frozen(wire.payload, "interrupt.payload"),
        deadline=_when_or_none(wire.deadline, "interrupt.deadline"),
        created_at=_when_or_none(wire.created_at, "interrupt.created_at"),
        parked=wire.parked,
        reviewers=tuple(wire.reviewers),
        seq=wire.seq,
    )


def _interrupts(items: dict[str, Interrupt]) -> Mapping[str, model.Interrupt]:
    return _view({key: _interrupt(item) for key, item in items.items()})


def _error(wire: Error) -> model.ErrorRecord:
    return model.ErrorRecord(
        time=_when(wire.time, "error.time"),
        node=wire.node,
        state=wire.state,
        message=wire.message,
        severity=wire.severity,
        recovered=wire.recovered,
        details=_frozen(wire.details, "error.details"),
    )


def run_state(wire: Snapshot, lists: Mapping[str, list[Any]] | None = None) -> model.RunState:
    """The run state a snapshot struct holds.

    Args:
        wire: The snapshot struct.
        lists: The whole list of each key of ``wire.lists`` (segments joined, checked).

    Raises:
        CodecError: User data or a timestamp is invalid; the message names the field.
    """
    data = _frozen(wire.data, "snapshot.data")
    if lists:
        data = MappingProxyType({**data, **lists})
    return model.RunState(
        run_id=wire.run_id,
        graph=wire.graph,
        graph_source=wire.graph_source,
        graph_digest=wire.graph_digest,
        definition=wire.definition,
        seq=wire.seq,
        status=wire.status,
        input=_frozen(wire.input, "snapshot.input"),
        data=data,
        nodes=_nodes(wire.nodes),
        interrupts=_interrupts(wire.interrupts),
        errors=tuple(map(_error, wire.errors)),
        writers=_view(wire.writers),
        created_at=_when(wire.created_at, "snapshot.created_at"),
        updated_at=_when(wire.updated_at, "snapshot.updated_at"),
        plans=_view({k: _plan(v) for k, v in wire.plans.items()}) if wire.plans else _EMPTY,
    )


def step_record(wire: Record) -> model.StepRecord:
    """The step record a record struct holds (once per record of a history read).

    Raises:
        CodecError: User data or a timestamp is invalid; the message names the field.
    """
    result, data, appended, time = wire.result, wire.data, wire.appended, wire.time
    # Twelve keywords: a call with sixteen or more is compiled to build a dict of them
    # first, which costs more than the record itself. The fields most steps leave empty
    # are set by a second call, only when one is not.
    record = model.StepRecord(
        seq=wire.seq,
        time=time if type(time) is datetime else _when(time, "record.time"),
        kind=wire.kind,
        node=wire.node,
        source=wire.source,
        trigger=wire.trigger,
        dest=wire.dest,
        result=_frozen(result, "record.result") if result else _EMPTY,
        data=_frozen(data, "record.data") if data else _EMPTY,
        appended=_frozen(appended, "record.appended") if appended else _EMPTY,
        nodes=_nodes(wire.nodes),
        status=wire.status,
    )
    if (
        wire.errors
        or wire.events
        or wire.interrupts is not None
        or wire.ledger is not None
        or wire.actor is not None
        or wire.plan is not None
    ):
        return model.replace(record, **_logged(wire))
    return record


def _logged(wire: Record) -> dict[str, Any]:
    """The fields of a record that most steps leave empty, as the model holds them."""
    errors, interrupts, events, ledger, actor = (
        wire.errors,
        wire.interrupts,
        wire.events,
        wire.ledger,
        wire.actor,
    )
    return {
        "plan": None if wire.plan is None else _plan(wire.plan),
        "errors": tuple(map(_error, errors)),
        "interrupts": None if interrupts is None else _interrupts(interrupts),
        "events": tuple(_frozen(event, "record.events") for event in events),
        "ledger": None if ledger is None else _ledger(ledger),
        "actor": None if actor is None else _actor(actor),
    }


def _actor(wire: Actor) -> model.Actor:
    return model.Actor(name=wire.name, groups=tuple(wire.groups))


# --------------------------------------------------------------------------- records unbuilt
# A read that renders thousands of records as JSON needs no model value per record:
# check_record makes every check step_record makes (the same messages, in the same
# order) and builds nothing.


def _check_user(value: dict[str, Any], label: str) -> None:
    """What :func:`_frozen` checks: a nested user-data map holds only plain values."""
    if value and not _CONTAINERS.isdisjoint(map(type, value.values())):
        check_plain(value, 0, label)


def check_record(wire: Record) -> None:
    """Check a record body as :func:`step_record` does, without building the record.

    Raises:
        CodecError: User data or a timestamp is invalid (the message of step_record).
    """
    if type(wire.time) is not datetime:
        _when(wire.time, "record.time")
    # Empty maps and lists (most of them) are passed over without a call.
    if wire.result:
        _check_user(wire.result, "record.result")
    if wire.data:
        _check_user(wire.data, "record.data")
    if wire.appended:
        _check_user(wire.appended, "record.appended")
    if wire.nodes:
        _check_nodes(wire.nodes)
    if wire.errors or wire.interrupts or wire.events or wire.ledger is not None:
        _check_logged(wire)
    if wire.plan is not None:
        _plan(wire.plan)


def _check_nodes(nodes: dict[str, Node]) -> None:
    """What :func:`_node_state` checks: each payload and ledger entry."""
    for node in nodes.values():
        if node.payload:
            _check_user(node.payload, "node.payload")
        for entry in node.ledger:
            _check_ledger(entry)
        if node.result is not None:
            _checked(node.result, "node.result")


def _check_ledger(entry: Ledger) -> None:
    """What :func:`_ledger` checks: the call's arguments and result hold only plain values."""
    _check_user(entry.arguments, "ledger.arguments")
    if entry.result:
        _check_user(entry.result, "ledger.result")


def _check_logged(wire: Record) -> None:
    """The checks of :func:`check_record` for the fields :func:`_logged` builds, in its order."""
    for error in wire.errors:
        _when(error.time, "error.time")
        _check_user(error.details, "error.details")
    if wire.interrupts:
        for item in wire.interrupts.values():
            _check_user(item.payload, "interrupt.payload")
            _when_or_none(item.deadline, "interrupt.deadline")
            _when_or_none(item.created_at, "interrupt.created_at")
    for event in wire.events:
        _check_user(event, "record.events")
    if wire.ledger is not None:
        _check_ledger(wire.ledger)
