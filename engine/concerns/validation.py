"""Output validation: structural checks of what an agent returned, before it is used.

:func:`validate_output` never raises; it returns a :class:`ValidationResult` listing every
issue. Rules: every output must be non-empty. A ``tooling`` agent (an installer, a test
runner) returns a mapping with ``returncode`` 0. An ``llm`` agent returns a mapping with
the required keys non-empty (or at least one non-empty value when none are required),
or a string of at least ``min_length`` characters that does not start like a model
failure ("I cannot", "Error:", ...) and, when it looks like JSON, parses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phasegraph.model import empty_field

__all__ = [
    "validate_output",
]

FAILURE_PATTERNS = (
    "i cannot",
    "i can't",
    "i'm sorry",
    "as an ai",
    "error:",
    "traceback (most recent call last)",
)
"""Lower-case openings of text that is a model refusing or failing, not an answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationResult:
    """The verdict on one agent output.

    Attributes:
        ok: Whether the output passed every rule.
        issues: What is wrong, one sentence each.
        agent: The agent whose output it is.
        raw: The output as returned.
        metadata: The rule settings used (kind, min length, required keys).
    """

    ok: bool
    issues: tuple[str, ...]
    agent: str
    raw: Any
    metadata: Mapping[str, Any] = empty_field()


def validate_output(
    agent: str,
    output: Any,
    *,
    kind: str = "llm",
    required: Sequence[str] = (),
    min_length: int = 20,
) -> ValidationResult:
    """Check ``output`` of ``agent`` by the rules for its ``kind``.

    Args:
        agent: The agent's name (for messages).
        output: What the agent returned.
        kind: ``llm`` (a model's answer) or ``tooling`` (a process result).
        required: Keys a mapping answer must have, non-empty.
        min_length: Shortest acceptable text answer.
    """
    if output is None or (isinstance(output, str | Mapping | list | tuple) and not output):
        issues = ["output is empty"]
    elif kind == "tooling":
        issues = _tooling_issues(output)
    elif isinstance(output, Mapping):
        issues = _mapping_issues(output, required)
    elif isinstance(output, str):
        issues = _text_issues(output, min_length)
    else:
        issues = [f"expected a mapping or text, got {type(output).__name__}"]
    metadata = {"kind": kind, "min_length": min_length, "required": list(required)}
    return ValidationResult(
        ok=not issues, issues=tuple(issues), agent=agent, raw=output, metadata=metadata
    )


def _tooling_issues(output: Any) -> list[str]:
    if not isinstance(output, Mapping) or "returncode" not in output:
        return ["a tooling result must be a mapping with a returncode"]
    code = output["returncode"]
    if code != 0:
        tail = str(output.get("stderr") or "").strip()[-200:]
        return [f"exited with status {code}" + (f": {tail}" if tail else "")]
    return []


def _mapping_issues(output: Mapping[str, Any], required: Sequence[str]) -> list[str]:
    if not required:
        return [] if any(output.values()) else ["every value of the output is empty"]
    return [f"required key {key!r} is missing or empty" for key in required if not output.get(key)]


def _text_issues(text: str, min_length: int) -> list[str]:
    stripped = text.strip()
    issues = []
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
        except json.JSONDecodeError as exc:
            issues.append(f"output looks like JSON but does not parse ({exc.msg}, char {exc.pos})")
        except ValueError as exc:  # parses, but holds a number too long to read
            issues.append(f"output looks like JSON but cannot be read ({exc})")
    if len(stripped) < min_length:
        issues.append(f"output is shorter than {min_length} characters")
    lowered = stripped.lower()
    failed = next((p for p in FAILURE_PATTERNS if lowered.startswith(p)), None)
    if failed:
        issues.append(f"output reads like a model failure ({stripped[: len(failed)]!r})")
    return issues
