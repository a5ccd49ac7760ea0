"""Step-record bodies → :class:`~phasegraph.model.StepRecord`, on the fast path.

Reading a history decodes thousands of records, and the table-driven
:data:`~phasegraph.codec._layout.RECORD` shape pays a call or two per field of every
nested value plus a keyword call to each frozen dataclass's ``__init__``. This module
checks the same rules inline for the fields every record carries (ids, seq, time, status,
paths, node states, flat user data), hands the rarely filled ones (errors, interrupts,
events, nested user data) to the shape's own decoders, and fills the dataclasses'
slots directly.

It is only a fast path, never a second definition of the format: whenever a body is not
of the usual form — anything unusual, invalid or not — it decodes the whole body again
with the strict shape. So every accepted body decodes to what the shape gives, and every
refused one raises the shape's own error, naming the same field.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from itertools import repeat
from operator import call
from types import MappingProxyType, MemberDescriptorType
from typing import Any, Final, TypeVar

from phasegraph import model
from phasegraph.codec._layout import NODE, RECORD, plain
from phasegraph.codec._values import STR
from phasegraph.errors import CodecError

__all__ = ["decode_record_body"]

_T = TypeVar("_T")


def _builder(cls: type[_T], names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], _T]:
    """A constructor of ``cls`` from its field values in ``names`` order, without ``__init__``.

    A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__``, one
    bytecode call per field; this stores straight into the slots from C (``map``), about
    twice as fast. That is only the same while ``__init__`` does nothing else, so it is
    checked here, at import: a slotted dataclass, every field named once, no
    ``__post_init__``.
    """
    fields = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    slots = [cls.__dict__.get(name) for name in names]
    setters = tuple(slot.__set__ for slot in slots if isinstance(slot, MemberDescriptorType))
    if (
        sorted(names) != sorted(fields)
        or len(setters) != len(names)
        or hasattr(cls, "__post_init__")
    ):
        raise TypeError(f"the fast record decoder no longer matches {cls.__qualname__}")
    consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend
    new, count = object.__new__, len(names)

    def build(values: tuple[Any, ...]) -> _T:
        obj: _T = new(cls)
        consume(map(call, setters, repeat(obj, count), values))
        return obj

    return build


# Field names in the order of the value tuples that _record and _node build.
_new_record: Final = _builder(
    model.StepRecord,
    (
        "seq",
        "time",
        "kind",
        "node",
        "source",
        "trigger",
        "dest",
        "result",
        "data",
        "nodes",
        "status",
        "errors",
        "interrupts",
        "events",
    ),
)
_new_node: Final = _builder(
    model.NodeState, ("status", "path", "outcome", "counters", "steps", "error", "payload")
)
_RECORD_KEYS: Final = RECORD.wire_keys
_NODE_KEYS: Final = NODE.wire_keys
_INT: Final = frozenset({int})
_CONTAINERS: Final = frozenset({dict, list})
_RUN_STATUS: Final = {member.value: member for member in model.RunStatus}
_NODE_STATUS: Final = {member.value: member for member in model.NodeStatus}
_OUTCOME: Final = {member.value: member for member in model.NodeOutcome}
_EMPTY: Final = model.EMPTY
# Fields usually empty in a record: decoded by the strict shape's own field decoders.
_ERRORS: Final = RECORD.field_decoder("e")
_EVENTS: Final = RECORD.field_decoder("ev")
_INTERRUPTS: Final = RECORD.field_decoder("i")


class _Unusual(CodecError):
    """The fast path does not take this body; the strict shape decodes it instead."""

    def __init__(self) -> None:
        super().__init__("not on the fast path")


def decode_record_body(body: Any) -> model.StepRecord:
    """Decode a record body of the current format (the envelope's ``body``).

    Raises:
        CodecError: The body is not a valid step record; the message is the strict
            shape's, naming the first bad field in wire-key order.
    """
    try:
        return _record(body)
    except CodecError:
        pass  # invalid, or valid but unusual: the strict shape decides (outside this block,
        # so its error does not carry the fast path's as context)
    return RECORD.decode(body, "the record body")


def _record(body: Any) -> model.StepRecord:
    if type(body) is not dict or body.keys() != _RECORD_KEYS:
        raise _Unusual
    seq, time, kind, node, trigger = body["q"], body["t"], body["k"], body["n"], body["tr"]
    status, source, dest = body["s"], body["src"], body["dst"]
    if (
        type(seq) is not int
        or type(time) is not datetime
        or type(kind) is not str
        or (node is not None and type(node) is not str)
        or (trigger is not None and type(trigger) is not str)
        or type(status) is not str
        or status not in _RUN_STATUS
        or type(source) is not list
        or not STR.issuperset(map(type, source))
        or type(dest) is not list
        or not STR.issuperset(map(type, dest))
    ):
        raise _Unusual
    errors, interrupts, events = body["e"], body["i"], body["ev"]
    return _new_record(
        (
            seq,
            time,
            kind,
            node,
            tuple(source),
            trigger,
            tuple(dest),
            _user(body["r"], "record.result"),
            _user(body["d"], "record.data"),
            _nodes(body["ns"]),
            _RUN_STATUS[status],
            () if errors == [] else _ERRORS(errors),
            None if interrupts is None else _INTERRUPTS(interrupts),
            () if events == [] else _EVENTS(events),
        )
    )


def _user(value: Any, label: str) -> Any:
    """A user-data map; flat ones (scalar values only, the usual case) checked inline."""
    if type(value) is dict and not value:
        return _EMPTY
    if (
        type(value) is dict
        and STR.issuperset(map(type, value))
        and _CONTAINERS.isdisjoint(map(type, value.values()))
    ):
        return MappingProxyType(value)
    return plain(value, label)


def _nodes(value: Any) -> Any:
    if type(value) is not dict or not STR.issuperset(map(type, value)):
        raise _Unusual
    if not value:
        return _EMPTY
    # zip/map rather than a comprehension: no extra frame per record (Python 3.11).
    return MappingProxyType(dict(zip(value, map(_node, value.values()), strict=True)))


def _node(body: Any) -> model.NodeState:
    if type(body) is not dict or body.keys() != _NODE_KEYS:
        raise _Unusual
    status, path, outcome, counters = body["s"], body["p"], body["o"], body["c"]
    steps, error = body["n"], body["e"]
    if (
        type(status) is not str
        or status not in _NODE_STATUS
        or type(path) is not list
        or not STR.issuperset(map(type, path))
        or (outcome is not None and (type(outcome) is not str or outcome not in _OUTCOME))
        or type(counters) is not dict
        or not STR.issuperset(map(type, counters))
        or not _INT.issuperset(map(type, counters.values()))
        or type(steps) is not int
        or (error is not None and type(error) is not str)
    ):
        raise _Unusual
    return _new_node(
        (
            _NODE_STATUS[status],
            tuple(path),
            None if outcome is None else _OUTCOME[outcome],
            MappingProxyType(counters) if counters else _EMPTY,
            steps,
            error,
            _user(body["pl"], "node.payload"),
        )
    )
