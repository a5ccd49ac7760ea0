"""JSON text for people and programs reading ``--json`` output: fast, keys sorted, indented.

The standard library's encoder falls back to pure Python when asked to indent; a
10,000-step history is megabytes of JSON, so msgspec writes it (in C) instead.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["to_json"]

_ENCODE: Final = msgspec.json.Encoder(order="sorted").encode


def to_json(value: Any, *, indent: int = 2) -> str:
    """``value`` — plain JSON types only (dict, list, str, int, float, bool, None) — as JSON.

    Keys are sorted at every level and text is written as it is (UTF-8), not escaped. A
    float that JSON cannot hold (NaN, infinity) is written as ``null``.

    Raises:
        TypeError: A value is not of a plain JSON type.
    """
    return msgspec.json.format(_ENCODE(value), indent=indent).decode()
