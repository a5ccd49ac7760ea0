"""The routing table a compiled machine fires from agrees with ``transitions`` itself.

For every shipped machine and random trigger sequences under random guard inputs,
:meth:`CompiledMachine.fire` (the table read back from the compiled ``transitions.Machine``)
and :meth:`CompiledMachine.fire_via_library` (the library's own ``trigger``) must reach
the same state, and refuse the same triggers with the same message.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.core._machine import CompiledMachine, _Guard, compile_machine
from phasegraph.errors import IllegalTriggerError
from phasegraph.model import MachineDef
from phasegraph.spec import load_machine

SHIPPED = sorted(
    entry.name.removesuffix(".yaml")
    for entry in files("phasegraph.states").iterdir()
    if entry.name.endswith(".yaml")
)


@cache
def _compiled(name: str) -> CompiledMachine:
    return compile_machine(load_machine(name))


def _predicates(definition: MachineDef) -> set[str]:
    return {p for t in definition.transitions for p in (*t.conditions, *t.unless)}


@st.composite
def guards(draw: st.DrawFn, definition: MachineDef) -> _Guard:
    """Guard inputs touching exactly what the machine's predicates read, and a bit more."""
    predicates = _predicates(definition)
    payload = {
        p.partition(":")[2]: draw(st.sampled_from([True, False, 0, 1, "", "x", None]))
        for p in predicates
        if p.startswith("payload:")
    }
    node_settings: dict[str, Any] = {}
    for p in sorted(predicates):
        if not p.startswith("setting:"):
            continue
        top, _, sub = p.partition(":")[2].partition(".")
        shape = draw(st.sampled_from(["absent", "flag", "mapping"]))
        if shape == "flag" and top not in node_settings:
            node_settings[top] = draw(st.booleans())
        elif shape == "mapping" and sub:
            nested = node_settings.get(top)
            nested = dict(nested) if isinstance(nested, dict) else {}
            nested[sub] = draw(st.booleans())
            node_settings[top] = nested
    limits = {name: draw(st.integers(0, 3)) for name in definition.budgets}
    counters = {name: draw(st.integers(0, 4)) for name in definition.budgets}
    return _Guard(
        node_id="node",
        counters=MappingProxyType(counters),
        limits=MappingProxyType(limits),
        payload=MappingProxyType(payload),
        settings=MappingProxyType(node_settings),
        prefix="",
    )


def _outcome(fire: Any, state: str, trigger: str, guard: _Guard) -> tuple[str, str]:
    try:
        return "moved", fire(state, trigger, guard)
    except IllegalTriggerError as exc:
        return "refused", str(exc)


@pytest.mark.parametrize("name", SHIPPED)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_table_and_library_agree_on_shipped_machines(name: str, data: st.DataObject) -> None:
    compiled = _compiled(name)
    definition = compiled.definition
    states = list(definition.states)
    triggers = [*sorted({t.trigger for t in definition.transitions}), "no_such_trigger"]
    state = definition.initial
    moved = refused = 0
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        if data.draw(st.integers(0, 5), label="jump") == 0:
            state = data.draw(st.sampled_from(states), label="state")
        trigger = data.draw(st.sampled_from(triggers), label="trigger")
        guard = data.draw(guards(definition), label="guard")
        table = _outcome(compiled.fire, state, trigger, guard)
        library = _outcome(compiled.fire_via_library, state, trigger, guard)
        assert table == library, (state, trigger, guard)
        if table[0] == "moved":
            moved += 1
            state = table[1]
        else:
            refused += 1
    assert moved + refused > 0


@pytest.mark.parametrize("name", SHIPPED)
def test_every_declared_route_is_reachable_through_both(name: str) -> None:
    """With every guard open, each (state, trigger) the library lists moves in both paths."""
    compiled = _compiled(name)
    definition = compiled.definition
    for state in definition.states:
        for trigger in compiled.legal_triggers(state):
            for limits in ({b: 0 for b in definition.budgets}, {b: 9 for b in definition.budgets}):
                guard = _Guard(
                    node_id="node",
                    counters=MappingProxyType({}),
                    limits=MappingProxyType(limits),
                    payload=MappingProxyType({}),
                    settings=MappingProxyType({}),
                    prefix="",
                )
                table = _outcome(compiled.fire, state, trigger, guard)
                assert table == _outcome(compiled.fire_via_library, state, trigger, guard)
                if all(limit for limit in limits.values()):
                    assert table[0] == "moved", (state, trigger)


def test_shipped_machines_are_found() -> None:
    assert {"loop", "task", "quality_loop", "fallback_chain"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_compiled_machines_have_no_callbacks(name: str) -> None:
    """The table skips nothing only because the library machine runs no callbacks at all."""
    library = _compiled(name)._machine
    for hook in ("before_state_change", "after_state_change", "prepare_event", "finalize_event"):
        assert getattr(library, hook) == [], hook
    assert library.on_exception == []
    assert library.on_final == []
    for state in library.states.values():
        assert state.on_enter == [], state.name
        assert state.on_exit == [], state.name
    for event in library.events.values():
        for candidates in event.transitions.values():
            for transition in candidates:
                assert transition.prepare == transition.before == transition.after == []
