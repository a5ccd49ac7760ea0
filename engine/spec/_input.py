"""Checks of a graph's ``input:`` JSON Schema, made when the graph loads.

The run input is validated against this schema when a run starts; a schema that is not
valid JSON Schema (2020-12), or that refers outside itself, or to itself, would fail
there instead, as a raw validator error. So it is checked here, once: the schema must
pass the meta-schema, and every ``$ref`` must be a JSON pointer into the same schema
(``#/...``) that resolves, without any chain of references leading back into a schema
that contains it (a recursive schema could make validation recurse without end).

Run input comes from clients, so the schema's regular expressions (``pattern``,
``patternProperties``) are matched with RE2, in time linear in the input: Python's
backtracking ``re`` can take exponential time on a pattern like ``^(a+)+$``. A pattern
RE2 cannot compile (backreferences, lookaround) is refused when the graph loads, located
at its own line. :func:`input_validator` is the validator runs use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import jsonschema
import jsonschema.protocols
import re2

from phasegraph.errors import Problem, SourceLocation

__all__ = ["input_schema_problems", "input_validator", "json_schema_error"]

_Pointer = tuple[str | int, ...]
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are instance data, not schemas: references there mean nothing."""
_ELSEWHERE = ("$dynamicRef", "$recursiveRef")
"""Keywords that resolve through the dynamic scope: refused, a local $ref does the job."""


def json_schema_error(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema 2020-12, or ``None`` when it is."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = _shown(tuple(exc.absolute_path)).removeprefix("input")
        return f"{where.removeprefix('.')}: {exc.message}" if where else exc.message
    return None


def input_schema_problems(
    schema: Mapping[str, Any],
    where: SourceLocation | None = None,
    locate: Callable[[tuple[str | int, ...]], SourceLocation] | None = None,
) -> list[Problem]:
    """What is wrong with a graph's ``input:`` schema (nothing when it is sound).

    Args:
        schema: The JSON Schema the run input must satisfy.
        where: Where the problems are located (the ``input:`` key).
        locate: Where a place inside the schema is (a key path from ``input:``), for
            problems that have a place of their own (a regular expression).

    Returns:
        One problem per fault; the message names the place inside the schema.
    """
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        text = f"{_shown(tuple(exc.absolute_path))}: not a valid JSON Schema: {exc.message}"
        return [Problem(text, where)]
    found = [
        Problem(text, locate(place) if locate is not None else where)
        for place, text in _pattern_problems(schema)
    ]
    if {"unevaluatedProperties", "patternProperties"} <= _schema_keys(schema):
        # jsonschema finds the evaluated keys with ``re``; RE2 is used everywhere else.
        text = "input: unevaluatedProperties with patternProperties is not accepted: use "
        found.append(Problem(text + "additionalProperties", where))
    messages: list[str] = []
    refs: list[tuple[_Pointer, _Pointer]] = []
    for here, keyword, value in _keywords(schema):
        if keyword in _ELSEWHERE:
            messages.append(f"{_shown(here)}: {keyword} is not accepted: use a local $ref")
        elif keyword == "$id" and here:
            text = "a nested $id is not accepted (it changes what '#/...' refers to)"
            messages.append(f"{_shown(here)}: {text}")
        elif keyword == "$ref":
            target = _target(schema, value)
            if isinstance(target, str):  # why it is refused
                messages.append(f"{_shown(here)}: {target}")
            else:
                refs.append((here, target))
    cycle = _recursion(refs)
    if cycle is not None:
        targets = [repr(_pointer_text(target)) for _, target in cycle]
        why = (
            f"{targets[0]} contains it"
            if len(targets) == 1
            else f"following {', then '.join(targets)} comes back to it"
        )
        messages.append(
            f"{_shown(cycle[0][0])}: a recursive $ref is not accepted ({why}): write the "
            "nesting out to a fixed depth"
        )
    return found + [Problem(text, where) for text in messages]


def input_validator(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A JSON Schema 2020-12 validator for run input that matches patterns with RE2.

    The schema must have passed :func:`input_schema_problems`.
    """
    validator: jsonschema.protocols.Validator = _LinearValidator(dict(schema))
    return validator


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported as a problem, not logged


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    """The compiled RE2 form of ``pattern`` (raises ``re2.error`` if RE2 cannot read it)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern_problems(schema: Mapping[str, Any]) -> Iterator[tuple[_Pointer, str]]:
    """Every regular expression in the schema that RE2 cannot compile, with its place."""
    stack: list[tuple[_Pointer, Any]] = [((), schema)]
    while stack:
        here, value = stack.pop()
        if isinstance(value, Mapping):
            pattern = value.get("pattern")
            if isinstance(pattern, str):
                yield from _refused(pattern, (*here, "pattern"))
            if isinstance(value.get("patternProperties"), Mapping):
                for key in value["patternProperties"]:
                    yield from _refused(str(key), (*here, "patternProperties", str(key)))
            stack += [((*here, str(k)), v) for k, v in value.items() if k not in _DATA_KEYWORDS]
        elif isinstance(value, list):
            stack += [((*here, i), item) for i, item in enumerate(value)]


def _schema_keys(schema: Mapping[str, Any]) -> set[str]:
    """Every key of every mapping in ``schema`` outside data keywords (iteratively)."""
    keys: set[str] = set()
    stack: list[Any] = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            keys.update(str(key) for key in value)
            stack += [item for key, item in value.items() if key not in _DATA_KEYWORDS]
        elif isinstance(value, list):
            stack += value
    return keys


def _refused(pattern: str, place: _Pointer) -> Iterator[tuple[_Pointer, str]]:
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        yield (
            place,
            (
                f"{_shown(place)}: pattern {pattern!r} is not accepted ({reason}): patterns are "
                "matched in linear time, without backreferences or lookaround"
            ),
        )


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    # jsonschema's own keyword matches patternProperties with ``re``: redone with RE2.
    if not validator.is_type(instance, "object"):
        return
    patterns = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = [
        key
        for key in instance
        if key not in schema.get("properties", {})
        and not any(regex.search(key) for regex in patterns)
    ]
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        shown = ", ".join(repr(key) for key in sorted(extras))
        yield jsonschema.ValidationError(f"additional properties are not allowed ({shown})")


_LinearValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def _keywords(schema: Mapping[str, Any]) -> Iterator[tuple[_Pointer, str, str]]:
    """Every string-valued ``$``-keyword, with the pointer of the schema holding it.

    Iterative (no recursion limit); the values of data keywords are not schemas and are
    skipped. Yields in document order.
    """
    stack: list[tuple[_Pointer, Any]] = [((), schema)]
    while stack:
        here, value = stack.pop()
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and key.startswith("$") and isinstance(item, str):
                    yield here, key, item
            children = [
                ((*here, str(key)), item)
                for key, item in value.items()
                if key not in _DATA_KEYWORDS
            ]
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(reversed([((*here, i), item) for i, item in enumerate(value)]))


def _target(schema: Mapping[str, Any], ref: str) -> _Pointer | str:
    """The pointer ``ref`` resolves to, or why it is refused."""
    if ref != "#" and not ref.startswith("#/"):
        return (
            f"a non-local $ref is not accepted ({ref!r}): refer only to '#/...' pointers "
            "into this schema"
        )
    found: _Pointer = ()
    node: Any = schema
    for raw in ref[2:].split("/") if ref != "#" else ():
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node, found = node[part], (*found, part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, found = node[int(part)], (*found, int(part))
        else:
            return f"$ref {ref!r} points to nothing in this schema"
    return found


def _recursion(refs: Sequence[tuple[_Pointer, _Pointer]]) -> list[tuple[_Pointer, _Pointer]] | None:
    """A chain of references that leads back to its start, if any.

    Reference A leads to reference B when B sits inside A's target: validating against
    the target may follow B. A cycle of such steps can recurse without end.
    """
    follows = {
        index: [other for other, (place, _) in enumerate(refs) if place[: len(target)] == target]
        for index, (_, target) in enumerate(refs)
    }
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in range(len(refs)):
        path: list[int] = []
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            index, position = stack.pop()
            if position == 0:
                if state.get(index) == 2:
                    continue
                if state.get(index) == 1:
                    return [refs[i] for i in path[path.index(index) :]]
                state[index] = 1
                path.append(index)
            if position < len(follows[index]):
                stack.append((index, position + 1))
                stack.append((follows[index][position], 0))
            else:
                state[index] = 2
                path.pop()
    return None


def _pointer_text(pointer: _Pointer) -> str:
    return "#" + "".join(f"/{part}" for part in pointer)


def _shown(pointer: _Pointer) -> str:
    return "input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in pointer)
