"""Compiled machines agree with a plain reference semantics, on random machines and triggers."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.core._machine import MachineSet, compile_machines
from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError
from phasegraph.model import BudgetDef, MachineDef, NodeOutcome, StateDef, TransitionDef

TRIGGERS = ["go", "back", "retry", "finish"]


def _machine(name: str, states: dict[str, StateDef], transitions, budgets=(), initial="s0"):
    return MachineDef(
        name=name,
        initial=initial,
        states=MappingProxyType(states),
        transitions=tuple(transitions),
        budgets=MappingProxyType({b.name: b for b in budgets}),
    )


@st.composite
def machines(draw: st.DrawFn) -> MachineDef:
    """Random flat machines: some hooked states, some final, budgets on some states."""
    n = draw(st.integers(2, 6))
    names = [f"s{i}" for i in range(n)]
    finals = set(draw(st.lists(st.sampled_from(names[1:]), max_size=2, unique=True)))
    states = {
        s: StateDef(
            name=s,
            final=NodeOutcome.SUCCESS if s in finals else None,
            hook=None if s in finals else s,
        )
        for s in names
    }
    live = [s for s in names if s not in finals]
    budgets = [
        BudgetDef(
            name=f"b{i}",
            limit=draw(st.integers(0, 3)),
            spend_on=tuple(
                draw(st.lists(st.sampled_from(names[1:]), min_size=1, max_size=2, unique=True))
            ),
        )
        for i in range(draw(st.integers(0, 2)))
    ]
    predicates = [f"budget:{b.name}" for b in budgets] + ["payload:ok", "setting:flag"]
    transitions = [
        TransitionDef(
            trigger=draw(st.sampled_from(TRIGGERS)),
            source=tuple(
                draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            ),
            dest=draw(st.sampled_from(names)),
            conditions=tuple(draw(st.lists(st.sampled_from(predicates), max_size=1))),
            unless=tuple(draw(st.lists(st.sampled_from(predicates), max_size=1))),
        )
        for _ in range(draw(st.integers(1, 8)))
    ]
    return _machine("random", states, transitions, budgets)


def _holds(predicate: str, counters, limits, payload, node_settings) -> bool:
    family, _, arg = predicate.partition(":")
    if family == "budget":
        return counters.get(arg, 0) < limits[arg]
    if family == "payload":
        return bool(payload.get(arg))
    return bool(node_settings.get(arg))


def reference_step(machine: MachineDef, state: str, trigger: str, counters, payload, node_settings):
    """The documented semantics, written plainly: first enabled transition wins."""
    limits = {b.name: b.limit for b in machine.budgets.values()}
    for t in machine.transitions:
        if t.trigger != trigger or state not in t.source:
            continue
        spends = [b.name for b in machine.budgets.values() if t.dest in b.spend_on]
        if not all(_holds(c, counters, limits, payload, node_settings) for c in t.conditions):
            continue
        if any(_holds(c, counters, limits, payload, node_settings) for c in t.unless):
            continue
        if any(counters.get(b, 0) >= limits[b] for b in spends):
            continue
        new = dict(counters)
        for b in spends:
            new[b] = new.get(b, 0) + 1
        return t.dest, new
    return None


@settings(max_examples=150, deadline=None)
@given(
    machine=machines(),
    steps=st.lists(st.tuples(st.sampled_from([*TRIGGERS, "nope"]), st.booleans()), max_size=25),
    flag=st.booleans(),
)
def test_random_triggers_follow_reference_semantics(machine, steps, flag):
    """Only declared states are reached, budgets never exceed limits, and illegal triggers
    raise the typed error listing the legal ones — exactly as the reference says."""
    compiled = compile_machines({"random": machine})
    node_settings = {"flag": flag}
    try:
        start = compiled.start("random", "n", node_settings)
    except BudgetExhaustedError:
        return
    position = start.position
    limits = {b.name: b.limit for b in machine.budgets.values()}
    for trigger, ok in steps:
        state = position.path[-1]
        if machine.states[state].final is not None:
            break
        payload = {"ok": ok}
        expected = reference_step(
            machine, state, trigger, position.counters, payload, node_settings
        )
        if expected is None:
            with pytest.raises(IllegalTriggerError) as info:
                compiled.step(
                    "random",
                    position,
                    trigger,
                    node_id="n",
                    settings=node_settings,
                    payload=payload,
                )
            assert info.value.legal == tuple(
                sorted({t.trigger for t in machine.transitions if state in t.source})
            )
            continue
        result = compiled.step(
            "random", position, trigger, node_id="n", settings=node_settings, payload=payload
        )
        assert result.position.path == (expected[0],)
        assert dict(result.position.counters) == expected[1]
        assert result.position.path[-1] in machine.states
        assert all(result.position.counters.get(b, 0) <= limits[b] for b in limits)
        position = result.position


def _quality_loop(reflect_limit: int = 1) -> MachineDef:
    states = {
        "execute": StateDef(name="execute", hook="execute"),
        "verify": StateDef(name="verify", hook="verify"),
        "reflect": StateDef(name="reflect", hook="reflect"),
        "completed": StateDef(name="completed", final=NodeOutcome.SUCCESS),
        "gave_up_after_reflections": StateDef(
            name="gave_up_after_reflections", final=NodeOutcome.GAVE_UP
        ),
    }
    transitions = [
        TransitionDef(trigger="done", source=("execute",), dest="verify"),
        TransitionDef(trigger="pass", source=("verify",), dest="completed"),
        TransitionDef(
            trigger="fail", source=("verify",), dest="reflect", conditions=("budget:reflect",)
        ),
        TransitionDef(
            trigger="fail",
            source=("verify",),
            dest="gave_up_after_reflections",
            unless=("budget:reflect",),
        ),
        TransitionDef(trigger="retry", source=("reflect",), dest="execute"),
    ]
    budgets = [BudgetDef(name="reflect", limit=reflect_limit, spend_on=("reflect",))]
    return _machine("quality_loop", states, transitions, budgets, initial="execute")


def _drive(machines: MachineSet, root: str, triggers, node_settings=None):
    node_settings = node_settings or {}
    result = machines.start(root, "n", node_settings)
    for trigger in triggers:
        result = machines.step(root, result.position, trigger, node_id="n", settings=node_settings)
    return result


def test_underscored_final_state_is_reached_when_reflections_run_out():
    compiled = compile_machines({"quality_loop": _quality_loop()})
    result = _drive(compiled, "quality_loop", ["done", "fail", "retry", "done", "fail"])
    assert result.position.path == ("gave_up_after_reflections",)
    assert result.outcome is NodeOutcome.GAVE_UP
    assert result.position.counters == {"reflect": 1}


def test_node_budget_override_allows_more_reflections():
    compiled = compile_machines({"quality_loop": _quality_loop()})
    result = _drive(
        compiled,
        "quality_loop",
        ["done", "fail", "retry", "done", "fail"],
        {"budgets": {"reflect": 2}},
    )
    assert result.position.path == ("reflect",)
    assert result.position.counters == {"reflect": 2}


def test_nested_machine_outcome_becomes_parent_trigger():
    """A state nesting a machine runs it to a final state; its outcome fires on the parent."""
    parent = _machine(
        "fallback",
        {
            "main": StateDef(name="main", machine="quality_loop"),
            "recovery": StateDef(name="recovery", hook="recover"),
            "done": StateDef(name="done", final=NodeOutcome.SUCCESS),
            "failed": StateDef(name="failed", final=NodeOutcome.FAILED),
        },
        [
            TransitionDef(trigger="success", source=("main",), dest="done"),
            TransitionDef(trigger="gave_up", source=("main",), dest="recovery"),
            TransitionDef(trigger="retry", source=("recovery",), dest="main"),
            TransitionDef(trigger="give_up", source=("recovery",), dest="failed"),
        ],
        initial="main",
    )
    compiled = compile_machines({"fallback": parent, "quality_loop": _quality_loop()})
    start = compiled.start("fallback", "n", {})
    assert start.position.path == ("main", "execute")
    assert compiled.hook("fallback", start.position.path) == "execute"
    gave_up = _drive(compiled, "fallback", ["done", "fail", "retry", "done", "fail"])
    assert gave_up.position.path == ("recovery",)
    assert gave_up.outcome is None
    assert gave_up.position.counters["main/reflect"] == 1
    # Re-entering the nested machine gives it fresh budgets.
    again = compiled.step("fallback", gave_up.position, "retry", node_id="n", settings={})
    assert again.position.path == ("main", "execute")
    assert "main/reflect" not in again.position.counters
    done = _drive(
        compiled, "fallback", ["done", "fail", "retry", "done", "fail", "retry", "done", "pass"]
    )
    assert done.position.path == ("done",)
    assert done.outcome is NodeOutcome.SUCCESS


def test_illegal_trigger_message_lists_legal_triggers():
    compiled = compile_machines({"quality_loop": _quality_loop()})
    start = compiled.start("quality_loop", "build", {})
    with pytest.raises(IllegalTriggerError) as info:
        compiled.step("quality_loop", start.position, "pass", node_id="build", settings={})
    assert "node 'build'" in str(info.value)
    assert "legal triggers: done" in str(info.value)


def test_machine_is_compiled_once_and_shared(monkeypatch):
    """Every node on a machine shares one compiled transitions.Machine; steps build none."""
    import asyncio

    from builders import engine, graph, prepared, returning
    from phasegraph.core import _machine as machine_module
    from phasegraph.store.memory import MemoryStore

    built: list[object] = []
    real = machine_module.Machine

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(machine_module, "Machine", counting)
    definition = graph([("a", []), ("b", []), ("c", ["a", "b"])])
    plan = prepared(definition, {(n, "run"): returning("ok") for n in "abc"})
    compiled_at_prepare = len(built)
    assert compiled_at_prepare == len(definition.machines)

    async def scenario():
        async with MemoryStore() as store:
            return await engine(store).run(plan)

    state = asyncio.run(scenario())
    assert state.nodes["c"].path == ("done",)
    assert len(built) == compiled_at_prepare
