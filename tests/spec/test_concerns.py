"""The triggers listed for phasegraph's concern actions are the ones their code returns."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

from phasegraph.spec._concerns import CONCERN_TRIGGERS


def _returned_triggers(target: str) -> set[str]:
    """Every ``trigger="..."`` literal in the function's source (its results' triggers)."""
    module, _, name = target.partition(":")
    source = textwrap.dedent(inspect.getsource(getattr(importlib.import_module(module), name)))
    return {
        keyword.value.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "trigger"
        and isinstance(keyword.value, ast.Constant)
        and isinstance(keyword.value.value, str)
    }


@pytest.mark.parametrize("target", sorted(CONCERN_TRIGGERS))
def test_listed_triggers_are_what_the_concern_returns(target: str) -> None:
    assert _returned_triggers(target) == set(CONCERN_TRIGGERS[target])


def test_every_concern_action_is_listed() -> None:
    actions = set()
    for module in ("fallback", "plans", "quality", "spec", "team"):
        loaded = importlib.import_module(f"phasegraph.concerns.{module}")
        for name, function in inspect.getmembers(loaded, inspect.iscoroutinefunction):
            target = f"{loaded.__name__}:{name}"
            if function.__module__ == loaded.__name__ and _returned_triggers(target):
                actions.add(target)
    assert actions == set(CONCERN_TRIGGERS)
