"""Loaded graph definitions ⇄ bytes: what the compiled-graph cache keeps between runs.

A :class:`~phasegraph.model.GraphDef` is written as msgpack by msgspec and read back
into the same frozen structs, typed, so the bytes are data and nothing else (no pickle,
no import on decode). Never part of a run's record: the cache is thrown away whenever
phasegraph's loader changes, so this layout carries no version of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

from phasegraph import model
from phasegraph.errors import CodecError

__all__ = ["decode_graph", "encode_graph"]

_S = TypeVar("_S", bound=msgspec.Struct)


def _plain(value: object) -> object:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise NotImplementedError(f"{type(value).__name__} is not part of a graph definition")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_plain)
_DECODER = msgspec.msgpack.Decoder(model.GraphDef)


def encode_graph(definition: model.GraphDef) -> bytes:
    """The definition as bytes :func:`decode_graph` reads back equal."""
    return _ENCODER.encode(definition)


def decode_graph(data: bytes) -> model.GraphDef:
    """The definition :func:`encode_graph` wrote, its mappings read-only as loaded.

    Raises:
        CodecError: The bytes are not a graph definition of this version's layout.
    """
    try:
        return _frozen(_DECODER.decode(data))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CodecError(f"not a cached graph definition: {exc}") from None


def _frozen(value: _S) -> _S:
    """``value`` with every mapping field read-only, as the loader builds them.

    The values of a struct's fields are made read-only at the top, where they hold
    structs, walked too; plain JSON inside (a binding's ``config``) stays plain.
    """
    changes: dict[str, Any] = {}
    for name in value.__struct_fields__:
        field = getattr(value, name)
        if isinstance(field, Mapping):
            items = {key: _walk(item) for key, item in field.items()}
            changes[name] = model.frozen_map(items) if items else model.EMPTY
        elif isinstance(field, tuple) and field and isinstance(field[0], msgspec.Struct):
            changes[name] = tuple(_frozen(item) for item in field)
        elif isinstance(field, msgspec.Struct):
            changes[name] = _frozen(field)
    return msgspec.structs.replace(value, **changes) if changes else value


def _walk(value: object) -> object:
    return _frozen(value) if isinstance(value, msgspec.Struct) else value
