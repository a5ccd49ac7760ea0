"""Messages for spec problems: pydantic validation errors in the words of the YAML formats.

A pydantic error says where (a key path) and what (a type code); this module turns it
into one line a person can act on: the dotted path, what is wrong, and how to fix it
(the allowed keys, the closest name, how a valid name looks). Every message of
:mod:`phasegraph.spec._schema` is built here or with :class:`Issues`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import NoneType
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, Tag
from pydantic_core import ErrorDetails

from phasegraph.spec._models import (
    ACTION_KINDS,
    HEADER_PATTERN,
    ID_PATTERN,
    NAME_PATTERN,
    PREDICATE_PATTERN,
    STATE_PATH_PATTERN,
    STATUS_PATTERN,
    STEP_PATTERN,
    TARGET_PATTERN,
    URL_PATTERN,
    HttpAction,
    HumanAction,
    LlmAction,
    Loc,
    PythonAction,
    ShellAction,
    ToolsAction,
)
from phasegraph.spec._suggest import did_you_mean

__all__ = ["Issues", "SpecIssue", "did_you_mean", "issue_of"]

_PATTERN_HINTS: Mapping[str, str] = {
    NAME_PATTERN: "start with a letter and use only letters, digits and '_'",
    ID_PATTERN: "start with a letter and use only letters, digits, '_' and '-'",
    PREDICATE_PATTERN: "write budget:NAME, payload:KEY or setting:DOTTED.KEY",
    TARGET_PATTERN: 'write "package.module:function"',
    STATUS_PATTERN: "write a status code (404), a class (4xx) or default",
    URL_PATTERN: "write an absolute URL starting with http:// or https:// and its host",
    HEADER_PATTERN: "use letters, digits and '-' (e.g. X-Request-Id)",
    STEP_PATTERN: "write TRIGGER -> STATE (a nested state as parent/child)",
    STATE_PATH_PATTERN: "write a state name, or parent/child for a nested state",
}
_PATTERN_NOUNS: Mapping[str, str] = {
    STATUS_PATTERN: "status key",
    URL_PATTERN: "URL",
    HEADER_PATTERN: "header name",
    STEP_PATTERN: "step",
    STATE_PATH_PATTERN: "state path",
}


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem in a document, at a key path (mapping keys and list indexes)."""

    loc: Loc
    message: str


class Issues(list[SpecIssue]):
    """Problems found by the document rules, in the order found."""

    def add(self, loc: Loc, text: str) -> None:
        """Add the problem ``text`` at ``loc``."""
        self.append(SpecIssue(loc, text))

    def unknown(self, loc: Loc, text: str, name: str, known: Collection[str], what: str) -> None:
        """Add ``text name`` at ``loc``, listing the ``known`` names and the closest one."""
        listed = ", ".join(sorted(known)) or "none declared"
        self.add(loc, f"{text} {name!r} ({what}: {listed}){did_you_mean(name, known)}")


def _is_marker(part: str | int) -> bool:
    # Union tags ("<python>") and pydantic's "[key]" are not keys of the document.
    return isinstance(part, str) and (part == "[key]" or (part[:1], part[-1:]) == ("<", ">"))


def _dotted(loc: Loc) -> str:
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return text.removeprefix(".") or "top level"


def issue_of(model: type[BaseModel], error: ErrorDetails) -> SpecIssue:
    """The problem a pydantic ``error`` of validating ``model`` stands for."""
    loc = tuple(part for part in error["loc"] if not _is_marker(part))
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return SpecIssue(loc, f"{_dotted(loc[:-1])}: required key {loc[-1]!r} is missing")
    if kind == "extra_forbidden":
        key, allowed = str(loc[-1]), _allowed_keys(model, error["loc"][:-1])
        text = f"unknown key {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}"
    elif kind == "action_kind":
        text = _action_kind_message(value)
    elif kind == "string_pattern_mismatch":
        text = _pattern_message(str(value), str((error.get("ctx") or {}).get("pattern", "")))
    elif kind.startswith("state_") or kind == "template" or isinstance(value, Mapping | list):
        text = error["msg"]
    else:
        text = f"{error['msg']} (got {value!r})"
        if isinstance(value, bool) and kind == "string_type":
            text += "; YAML reads yes/no/on/off/true/false as booleans: quote it"
    return SpecIssue(loc, f"{_dotted(loc)}: {text}")


def _pattern_message(value: str, pattern: str) -> str:
    noun = _PATTERN_NOUNS.get(pattern, "name")
    text = f"{value!r} is not a valid {noun}: {_PATTERN_HINTS.get(pattern, 'match ' + pattern)}"
    if pattern == NAME_PATTERN and ("/" in value or "." in value):
        text += " ('/' and '.' are reserved for nested state paths such as parent/child)"
    return text


def _action_kind_message(value: object) -> str:
    kinds = ", ".join(ACTION_KINDS)
    if not isinstance(value, Mapping):
        return f"an action is a mapping with exactly one kind key ({kinds}), got {value!r}"
    present = [kind for kind in ACTION_KINDS if kind in value]
    if present:
        return f"an action has exactly one kind, this one has {', '.join(present)}: keep one"
    models = (PythonAction, ShellAction, HttpAction, HumanAction, LlmAction, ToolsAction)
    options = {name for model in models for name in model.model_fields}
    unknown = [str(key) for key in value if key not in options]
    if unknown:
        hint = did_you_mean(unknown[0], ACTION_KINDS)
        return f"unknown action kind {unknown[0]!r}: use one of {kinds}{hint}"
    return f"the action has no kind: add one of {kinds}"


def _allowed_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys the mapping at ``loc`` may have: walk the models' annotations along it."""
    hint: Any = model
    for part in (*loc, None):
        while get_origin(hint) is Annotated or NoneType in get_args(hint):  # X, X | None
            hint = next(arg for arg in get_args(hint) if arg is not NoneType)
        fields = getattr(hint, "model_fields", {})
        keys = {info.alias or name: info.annotation for name, info in fields.items()}
        if part is None:
            return list(keys)
        # A model field, a union member by tag, or the item type of a list or dict.
        tagged = [arg for arg in get_args(hint) if Tag(str(part)) in get_args(arg)[1:]]
        hint = keys.get(str(part)) if keys else (tagged or get_args(hint)[-1:] or [None])[0]
    return []
