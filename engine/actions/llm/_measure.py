"""What a conversation weighs: estimated tokens, and the model answers it stands for."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "SUMMARY_PREFIX",
    "UNBOUNDED_COMPLETION",
    "estimate_tokens",
    "is_summary",
    "most_prompt_tokens",
    "summarized_turns",
    "summary_head",
]

_CHARS_PER_TOKEN: Final = 4
_FEWEST_CHARS_PER_TOKEN: Final = 3
"""A reservation's estimate: code and JSON run to fewer characters a token than prose."""

UNBOUNDED_COMPLETION: Final = 4096
"""What a call without ``max_tokens`` reserves for its answer (``check`` names such calls
when the graph's budget is ``required``: nothing bounds what they may spend)."""

SUMMARY_PREFIX: Final = "Summary of the earlier conversation"
"""How a summary message starts: ``PREFIX (N turns):\\nTEXT``, N the model's answers in it."""
_TURNS: Final = re.compile(re.escape(SUMMARY_PREFIX) + r" \(([0-9]+) turns\):\n")


def estimate_tokens(value: Any) -> int:
    """About how many tokens ``value`` (text, or JSON-like data) is: four characters each."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def most_prompt_tokens(messages: Any, tools: Any = ()) -> int:
    """How many tokens a request's messages and tools may be, estimated high.

    Three characters a token of their JSON (keys and quotes included), for a
    reservation that must not fall short of what the provider counts.
    """
    text = json.dumps([messages, tools], sort_keys=True, default=str)
    return math.ceil(len(text) / _FEWEST_CHARS_PER_TOKEN)


def is_summary(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a compression summary."""
    return str(message.get("content") or "").startswith(SUMMARY_PREFIX)


def summary_head(turns: int) -> str:
    """The first line of a summary of ``turns`` model answers."""
    return f"{SUMMARY_PREFIX} ({turns} turns):\n"


def summarized_turns(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many model answers ``messages`` stand for, counting those inside summaries."""
    turns = 0
    for message in messages:
        if message.get("role") == "assistant":
            turns += 1
        elif message.get("role") == "user":
            found = _TURNS.match(str(message.get("content") or ""))
            turns += int(found[1]) if found else 0
    return turns
