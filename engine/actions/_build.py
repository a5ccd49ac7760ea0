"""Action kinds: turn a declared :class:`~phasegraph.model.ActionDef` into a callable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from phasegraph.actions._base import (
    Action,
    ActionContext,
    ActionResult,
    CallNext,
    EventSink,
    ToolCall,
)
from phasegraph.actions._python import build_python_action
from phasegraph.actions._shell import build_shell_action
from phasegraph.errors import Problem, SpecError
from phasegraph.model import ActionDef

__all__ = [
    "BUILDERS",
    "Action",
    "ActionContext",
    "ActionResult",
    "CallNext",
    "EventSink",
    "ToolCall",
    "build_action",
]

Builder = Callable[[ActionDef, Path | None], Action]


def _build_http_action(definition: ActionDef, base_dir: Path | None) -> Action:
    # aiohttp takes a noticeable share of start-up time: only a graph with an http binding
    # loads it, when the graph is prepared.
    from phasegraph.actions._http import build_http_action

    return build_http_action(definition, base_dir)


def _build_llm_action(definition: ActionDef, base_dir: Path | None) -> Action:
    # The openai client is as heavy to import as aiohttp: only model graphs load it.
    from phasegraph.actions.llm._action import build_llm_action

    return build_llm_action(definition, base_dir)


def _build_tools_action(definition: ActionDef, base_dir: Path | None) -> Action:
    from phasegraph.actions.llm._tools import build_tools_action

    return build_tools_action(definition, base_dir)


BUILDERS: Mapping[str, Builder] = MappingProxyType(
    {
        "python": build_python_action,
        "shell": build_shell_action,
        "http": _build_http_action,
        "llm": _build_llm_action,
        "tools": _build_tools_action,
    }
)
"""Action kind → builder. Read-only: kinds are part of the YAML format. ``human:``
bindings build no callable: they are gates (:func:`~phasegraph.actions.build_gate`)."""


def build_action(definition: ActionDef, base_dir: Path | None = None) -> Action:
    """Build the callable for one binding, once, before the run's first step.

    Args:
        definition: The declared action.
        base_dir: The graph file's folder (``python:`` modules may live beside it).

    Raises:
        SpecError: Unknown kind, or the action cannot be prepared (e.g. import failure).
    """
    builder = BUILDERS.get(definition.kind)
    if builder is None:
        known = ", ".join(sorted(BUILDERS))
        raise SpecError(
            [
                Problem(
                    f"action kind {definition.kind!r} is not available (known: {known})",
                    definition.location,
                )
            ]
        )
    return builder(definition, base_dir)
