"""An ``llm:`` binding as a typed value: the configuration both the call and compression read.

Its own module so that :mod:`phasegraph.actions.llm._action` (which calls the model) and
:mod:`phasegraph.actions.llm._compress` (which it calls when the conversation grows too
long) can both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "BUDGET_OUT",
    "DEFAULT_CONVERSATION",
    "DEFAULT_TIMEOUT",
    "OUTCOMES",
    "LlmConfig",
    "plain",
]

DEFAULT_CONVERSATION: Final = "conversation"
OUTCOMES: Final = ("answer", "tool_calls", "compressed", "budget_out")
"""What an llm step can end in; ``on_outcome:`` maps each to the trigger it fires
(``budget_out`` fires only when mapped: unmapped, the run's budget gate opens)."""
BUDGET_OUT: Final = "budget_out"
DEFAULT_TIMEOUT: Final = 120.0
FORCED_ATTEMPTS: Final = 2
"""Answers asked for when ``tool_choice`` forces a call and the model made none."""


def plain(value: Any) -> Any:
    """``value`` with its frozen mappings and tuples as dicts and lists (JSON, for a request)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmConfig:
    """An ``llm:`` binding, validated by the schema and read once."""

    model: str
    system: str | None = None
    prompt: str | None = None
    conversation: str = DEFAULT_CONVERSATION
    tools: tuple[str, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    auxiliary_model: str | None = None
    context_tokens: int | None = None
    keep_recent: int = 6
    stream: bool = False
    retries: int = 2
    timeout: float = DEFAULT_TIMEOUT
    on_outcome: Mapping[str, str | None] = field(default_factory=dict)
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    response_format: Mapping[str, Any] | None = None
    """``{schema, name, strict, attempts}``, as plain JSON values."""

    @classmethod
    def of(cls, binding: Mapping[str, Any]) -> LlmConfig:
        """Read a binding (``{llm: {...}, on_outcome: {...}, timeout: ...}``)."""
        spec = dict(binding["llm"])
        spec["tools"] = tuple(spec.get("tools") or ())
        if spec.get("response_format") is not None:
            spec["response_format"] = plain(spec["response_format"])
        return cls(
            **spec,
            timeout=float(binding.get("timeout") or DEFAULT_TIMEOUT),
            on_outcome=MappingProxyType(dict(binding.get("on_outcome") or {})),
        )

    @property
    def forces_call(self) -> bool:
        """Whether ``tool_choice`` makes the model call a tool (``required`` or a name)."""
        return self.tool_choice not in (None, "auto", "none")

    @property
    def attempts(self) -> int:
        """Answers one step may ask for: more than one when an answer can be refused."""
        if self.response_format is not None:
            return int(self.response_format["attempts"])
        return FORCED_ATTEMPTS if self.forces_call or self.parallel_tool_calls is False else 1

    def trigger(self, outcome: str) -> str | None:
        """The trigger an outcome fires (None: the binding does not expect it)."""
        return self.on_outcome.get(outcome, outcome)
