"""A run's history as JSON, straight from its stored records: the one way it is rendered.

This is the ``StepRecord`` shape of ``specs/openapi.yaml``: what ``phasegraph history
--json`` prints, what ``Engine.history_json`` returns and what ``GET /runs/ID/history``
pages through. It is made from each record's body as :func:`~phasegraph.codec.read_record`
reads it (checked, unbuilt), with no model value in between: a history is thousands of
records, and building each as a ``StepRecord`` first and converting that costs two to six
times as much (``benchmarks/history_bench.py``; ``docs/internals.md``, "JSON shapes").
Every other shape lives in :mod:`phasegraph.views`, whose conventions this follows: keys
sorted, timestamps ISO 8601 in UTC (stored times decode in UTC), bytes in hex.

A long history is rendered in pages (:func:`history_page_json`), joined into one array by
:func:`history_json`: the bodies and views of one page are alive at a time, not those of
every record of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from types import NoneType
from typing import Any, Final

import msgspec

from phasegraph import model
from phasegraph.codec._envelope import encode_record, read_record
from phasegraph.codec._json import _ENCODE
from phasegraph.codec._wire import Actor, Error, Interrupt, Ledger, Node, Plan, Record

__all__ = ["history_json", "history_page_json", "plan_json", "record_json"]

_PLAIN: Final = frozenset({str, int, float, bool, NoneType})
_FORMAT: Final = msgspec.json.format


def _user(value: Any) -> Any:
    """User data of a checked body as :func:`phasegraph.views.jsonable` renders it.

    A body holds dicts (str keys), lists and the scalars of the type table: datetimes
    (decoded in UTC) are written in ISO 8601 and bytes in hex, as ``jsonable`` writes them.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        if _PLAIN.issuperset(map(type, value.values())):
            return value  # the usual map of run data, written as it is
        return {key: _user(item) for key, item in value.items()}
    if kind is list:
        if _PLAIN.issuperset(map(type, value)):
            return value
        return [_user(item) for item in value]
    if kind is datetime:
        return value.isoformat()
    if kind is bytes:
        return value.hex()
    return value  # not in a checked body


def _node(node: Node) -> dict[str, Any]:
    payload = node.payload
    return {
        "status": node.status,  # an enum member: msgspec writes its value
        "path": node.path,
        "outcome": node.outcome,
        "counters": node.counters or {},
        "steps": node.steps,
        "error": node.error,
        "payload": _user(payload) if payload else {},
        "ledger": [_entry(entry) for entry in node.ledger] if node.ledger else [],
        "result": _user(node.result),
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    """A plan's JSON value (``Plan``), from its wire form."""
    return {
        "hook": plan.hook,
        "version": plan.version,
        "items": [
            {"id": i.id, "needs": i.needs, "value": _user(i.value), "version": i.version}
            for i in plan.items
        ],
        "members": plan.members,
        "limit": plan.limit,
    }


def _entry(entry: Ledger) -> dict[str, Any]:
    result = entry.result
    return {
        "id": entry.id,
        "index": entry.index,
        "tool": entry.tool,
        "arguments": _user(entry.arguments),
        "effect": entry.effect,
        "on_unknown": entry.on_unknown,
        "result": None if result is None else _user(result),
    }


def _error(error: Error) -> dict[str, Any]:
    return {
        "time": error.time.isoformat(),
        "node": error.node,
        "state": error.state,
        "message": error.message,
        "severity": error.severity,
        "recovered": error.recovered,
        "details": _user(error.details),
    }


def _interrupt(item: Interrupt) -> dict[str, Any]:
    deadline, created_at = item.deadline, item.created_at
    return {
        "id": item.id,
        "node": item.node,
        "kind": item.kind,
        "payload": _user(item.payload),
        "deadline": None if deadline is None else deadline.isoformat(),
        "created_at": None if created_at is None else created_at.isoformat(),
        "parked": item.parked,
        "reviewers": item.reviewers,
        "seq": item.seq,
    }


def _actor(actor: Actor) -> dict[str, Any]:
    return {"name": actor.name, "groups": actor.groups}


def _record(body: Record) -> dict[str, Any]:
    """The JSON value of one record (``StepRecord``): every field of the record it holds."""
    result, data, appended = body.result, body.data, body.appended
    nodes, errors, interrupts, events = body.nodes, body.errors, body.interrupts, body.events
    return {
        "seq": body.seq,
        "time": body.time.isoformat(),
        "kind": body.kind,
        "node": body.node,
        "source": body.source,
        "trigger": body.trigger,
        "dest": body.dest,
        # An empty map (left out of the record's bytes since format 5) is written {}.
        "result": _user(result) if result else {},
        "data": _user(data) if data else {},
        "appended": _user(appended) if appended else {},
        "nodes": {key: _node(node) for key, node in nodes.items()} if nodes else {},
        "status": body.status,
        "errors": [_error(error) for error in errors] if errors else [],
        "interrupts": (
            None if interrupts is None else {k: _interrupt(v) for k, v in interrupts.items()}
        ),
        "events": [_user(event) for event in events] if events else [],
        "ledger": None if body.ledger is None else _entry(body.ledger),
        "actor": None if body.actor is None else _actor(body.actor),
        "plan": None if body.plan is None else plan_json(body.plan),
    }


def record_json(record: model.StepRecord) -> dict[str, Any]:
    """One step record's JSON value, as a history renders it (a replay report's records).

    The record goes through its bytes, so the one renderer of records serves here too.

    Raises:
        CodecError: A value of the record cannot be stored.
    """
    return _record(read_record(encode_record(record)))


def history_page_json(bodies: Sequence[Record]) -> bytes:
    """One page of a history: its records' JSON as items of the array :func:`history_json` makes.

    Args:
        bodies: Record bodies, each as :func:`~phasegraph.codec.read_record` returned it.

    Returns:
        The items, each indented by one level, separated by ``,`` and a newline; empty
        for no records.
    """
    if not bodies:
        return b""
    text = _FORMAT(_ENCODE(list(map(_record, bodies))), indent=2)
    return text[2:-2]  # without the page's own "[\n" and "\n]"


def history_json(pages: Iterable[bytes]) -> bytes:
    """The JSON array of every record of the pages, in order (UTF-8, as ``to_json``)."""
    items = b",\n".join(page for page in pages if page)
    return b"".join((b"[\n", items, b"\n]")) if items else b"[]"
