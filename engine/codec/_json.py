"""JSON text for people and programs reading ``--json`` output: fast, keys sorted, indented.

The standard library's encoder falls back to pure Python when asked to indent; a
10,000-step history is megabytes of JSON, so msgspec writes it (in C) instead. JSON from
people and clients is read with the standard library and :func:`json_int`.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import msgspec

__all__ = ["json_int", "to_json"]

_ENCODE: Final = msgspec.json.Encoder(order="sorted").encode


def to_json(value: Any, *, indent: int = 2) -> str:
    """``value`` — plain JSON types only (dict, list, str, int, float, bool, None) — as JSON.

    Keys are sorted at every level and text is written as it is (UTF-8), not escaped. A
    float that JSON cannot hold (NaN, infinity) is written as ``null``.

    Raises:
        TypeError: A value is not of a plain JSON type.
    """
    return msgspec.json.format(_ENCODE(value), indent=indent).decode()


def json_int(digits: str) -> int:
    """An integer of JSON text (``json.loads(..., parse_int=json_int)``).

    Raises:
        ValueError: It has more digits than Python converts from text
            (``sys.get_int_max_str_digits()``, 4300 by default); the message says so in
            words for the person who wrote it (Python's own suggests changing the limit).
    """
    try:
        return int(digits)
    except ValueError:
        limit = sys.get_int_max_str_digits()
        raise ValueError(
            f"a number of {len(digits.lstrip('-'))} digits: phasegraph reads integers of "
            f"at most {limit} digits; write it as a string to pass it as text"
        ) from None
