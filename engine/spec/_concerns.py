"""The triggers phasegraph's own concern actions fire, known before anything is imported.

A ``python:`` binding that lists no ``triggers:`` may fire anything, so nothing can be
checked about it, but the concern actions of :mod:`phasegraph.concerns` are ours: a
binding of one without ``triggers:`` is taken to declare exactly what it fires, and a
state that refuses one of those is an error when the graph loads. The loader cannot
import the concerns (they sit above it), so their triggers are listed here;
``tests/spec/test_concerns.py`` reads each concern's source and fails when the two differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["CONCERN_TRIGGERS"]

CONCERN_TRIGGERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "phasegraph.concerns.fallback:recover": ("retry",),
        "phasegraph.concerns.fallback:emergency": ("fail",),
        "phasegraph.concerns.quality:reflect": ("retry",),
        "phasegraph.concerns.spec:check_spec": ("submit", "invalid"),
        "phasegraph.concerns.team:validate": ("passed", "failed"),
        "phasegraph.concerns.team:rollback": ("passed", "failed"),
        "phasegraph.concerns.team:checkpoint": ("saved",),
        "phasegraph.concerns.team:run_command": ("ok", "fail"),
        "phasegraph.concerns.plans:given_plan": ("given", "ask"),
        "phasegraph.concerns.plans:read_plan": ("planned", "unreadable"),
    }
)
"""``python:`` target of a concern action -> every trigger it returns (a raised error
fires ``error``, as for any action)."""
