"""Whether an answer complies with what its ``llm:`` binding asked of the turn.

``tool_choice`` and ``parallel_tool_calls`` are sent to the server, and
``response_format`` as a ``json_schema`` response format; a server that enforces them
(with a grammar, as local servers do) never answers otherwise, but many only pass them on
as a wish. So the answer is checked again here: one that does not comply is shown to the
model with why, and it answers again (:attr:`LlmConfig.attempts` answers in all).

A refusal (the API's ``refusal`` field: the model declined to answer in the schema) is
not re-asked: it is the model's answer, kept on its message for the agent to see.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jsonschema

from phasegraph.actions.llm._config import LlmConfig

__all__ = ["Verdict", "check_answer", "request_format"]

_ERRORS_SHOWN: Final = 3


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the check found: why the answer does not comply, or its parsed JSON."""

    misfit: str | None = None
    structured: Any = None


def request_format(config: LlmConfig) -> dict[str, Any] | None:
    """The ``response_format`` the API takes for the binding's, if it has one."""
    spec = config.response_format
    if spec is None:
        return None
    schema = {"name": spec["name"], "schema": spec["schema"], "strict": spec["strict"]}
    return {"type": "json_schema", "json_schema": schema}


def check_answer(config: LlmConfig, message: Mapping[str, Any]) -> Verdict:
    """Check ``message`` (the assistant's) against the binding's turn controls."""
    if message.get("refusal"):
        return Verdict()
    calls = message.get("tool_calls") or []
    names = [str((call.get("function") or {}).get("name", "")) for call in calls]
    choice = config.tool_choice
    if choice == "required" and not calls:
        return Verdict("You must call one of the tools offered, and you called none: call one.")
    if config.forces_call and choice != "required" and (not calls or set(names) != {choice}):
        return Verdict(f"You must call the tool {choice!r} now, and only it: call it.")
    if choice == "none" and calls:
        return Verdict("You may not call tools now: answer in text.")
    if config.parallel_tool_calls is False and len(calls) > 1:
        return Verdict(f"Call one tool at a time; you called {len(calls)}: call one.")
    if config.response_format is None or calls:
        return Verdict()
    return _structured(config.response_format, message.get("content"))


def _structured(spec: Mapping[str, Any], content: Any) -> Verdict:
    name = spec["name"]
    try:
        value = json.loads(content) if isinstance(content, str) else None
    except ValueError as exc:
        return Verdict(f"Your answer is not JSON ({exc}): answer with JSON matching {name!r} only.")
    if value is None and content != "null":
        return Verdict(f"You answered nothing: answer with JSON matching {name!r} only.")
    validator = jsonschema.Draft202012Validator(spec["schema"])
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        said = "; ".join(_error(e) for e in errors[:_ERRORS_SHOWN])
        more = f" (and {len(errors) - _ERRORS_SHOWN} more)" if len(errors) > _ERRORS_SHOWN else ""
        return Verdict(
            f"Your answer does not match the schema {name!r}: {said}{more}. "
            "Answer again with JSON that does."
        )
    return Verdict(structured=value)


def _error(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"at /{where}: {error.message}" if where else error.message
