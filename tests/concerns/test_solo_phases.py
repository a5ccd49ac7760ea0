"""The ``solo_phases`` machine: planning → building → verification → delivery.

Scenarios of source note 002 (SOLO four-stage state machine, U3 phase enforcement and
advance_phase, auto-advance), driven through the real interpreter on a memory store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns import fallback, quality
from phasegraph.concerns.solo import PHASES, phase_action
from phasegraph.model import GraphDef, NodeDef, NodeOutcome, NodeStatus, RunStatus
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore

SOLO = load_machine("solo_phases")


def solo_graph(settings: Mapping[str, Any] | None = None) -> GraphDef:
    node = NodeDef(id="agent", machine="solo_phases", settings=MappingProxyType(settings or {}))
    return GraphDef(
        name="solo",
        nodes=(node,),
        machines=MappingProxyType({"solo_phases": SOLO}),
        digest="solo",
    )


def scripted(script: Mapping[str, Sequence[str]], calls: list[tuple[str, int]]):
    """An agent returning, per phase, the next trigger of its script (then `advance`)."""
    used = {phase: 0 for phase in PHASES}

    async def agent(ctx: ActionContext) -> ActionResult:
        phase = ctx.state
        steps = script.get(phase, ())
        trigger = steps[used[phase]] if used[phase] < len(steps) else "advance"
        used[phase] += 1
        calls.append((phase, ctx.counters.get(phase, 0)))
        return ActionResult(trigger=trigger)

    return agent


async def drive(agent, settings: Mapping[str, Any] | None = None):
    definition = prepared(solo_graph(settings), {("agent", p): agent for p in PHASES})
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(definition)
        history = await eng.history(state.run_id)
    return state, history


def path_of(history) -> list[str]:
    return [h.dest[-1] for h in history if h.kind in {"start", "transition"}]


async def test_advance_walks_the_four_phases_in_order_and_done_delivers(tmp_path: Path):
    """Note 002 U3 happy paths: planning reads (search-like) → advance → building writes →
    advance → verification runs a command → advance → delivery may use any tool → done."""
    seen: list[tuple[str, Any]] = []
    rules = {
        "planning": {"tools": ["read_file", "list_files"]},
        "building": {"tools": ["write_file", "read_file"]},
        "verification": {"tools": ["run_command", "read_file"]},
        "delivery": {"tools": "*"},
    }
    work = {
        "planning": ("list_files", {"cwd": str(tmp_path)}),
        "building": ("write_file", {"cwd": str(tmp_path), "path": "m.py", "text": "x = 1\n"}),
        "verification": ("run_command", {"cwd": str(tmp_path), "argv": ["python3", "m.py"]}),
        "delivery": ("run_command", {"cwd": str(tmp_path), "argv": ["rm", "m.py"]}),
    }

    async def agent(ctx: ActionContext) -> ActionResult:
        name, args = work[ctx.state]
        seen.append((ctx.state, await ctx.tool(name, **args)))
        return ActionResult(trigger="done" if ctx.state == "delivery" else "advance")

    state, history = await drive(agent, {"phases": rules})
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["agent"].path == ("delivered",)
    assert path_of(history) == [*PHASES, "delivered"]
    assert [phase for phase, _ in seen] == list(PHASES)
    assert all("error" not in result for _, result in seen)
    assert seen[2][1]["exit"] == 0
    assert not (tmp_path / "m.py").exists()


async def test_advance_past_delivery_fails_naming_the_legal_triggers():
    """Note 002 U3 edge case: advance_phase called at Delivery is an error."""
    calls: list[tuple[str, int]] = []
    state, _ = await drive(scripted({"delivery": ["advance"]}, calls))
    node = state.nodes["agent"]
    assert node.status is NodeStatus.FAILED
    assert node.path == ("delivery",)
    assert "'advance'" in (node.error or "")
    assert "legal triggers: done, fail, work" in (node.error or "")
    assert state.status is RunStatus.FAILED


async def test_done_before_delivery_is_illegal():
    calls: list[tuple[str, int]] = []
    state, _ = await drive(scripted({"planning": ["done"]}, calls))
    assert state.nodes["agent"].status is NodeStatus.FAILED
    assert "legal triggers: advance, fail, work" in (state.nodes["agent"].error or "")


async def test_auto_advance_after_three_steps_in_planning():
    """Note 002 U3 edge case: auto-advance after 3 steps in Planning → the phase changes
    automatically on the 4th step (the agent never asks to advance)."""
    calls: list[tuple[str, int]] = []
    agent = phase_action(scripted({"planning": ["work"] * 10}, calls))
    state, history = await drive(agent, {"auto_advance_after_steps": {"planning": 3}})
    assert [phase for phase, _ in calls[:4]] == ["planning"] * 3 + ["building"]
    assert state.nodes["agent"].counters["planning"] == 3
    changed = [e for h in history for e in h.events if e["kind"] == "phase_changed"]
    assert changed[0] == {
        "kind": "phase_changed",
        "phase": "building",
        "previous": "planning",
        "auto": True,
    }
    assert [e["auto"] for e in changed] == [True, False, False]


async def test_auto_advance_for_every_phase_never_passes_delivery():
    """One number applies to every phase; in delivery `work` is never turned into advance."""
    calls: list[tuple[str, int]] = []
    script = {phase: ["work"] * 5 for phase in PHASES}
    script["delivery"] = ["work", "work", "done"]
    state, _ = await drive(phase_action(scripted(script, calls)), {"auto_advance_after_steps": 2})
    assert [phase for phase, _ in calls] == [
        "planning", "planning", "building", "building",
        "verification", "verification", "delivery", "delivery", "delivery",
    ]  # fmt: skip
    assert state.nodes["agent"].outcome is NodeOutcome.SUCCESS


async def test_phase_budget_caps_a_phase_even_for_an_agent_that_never_advances():
    """Note 002 risk 3 (phase deadlock): the machine's per-phase budget advances by itself,
    and an agent stuck in delivery ends `exhausted` (gave up), never looping forever."""
    calls: list[tuple[str, int]] = []
    script = {phase: ["work"] * 50 for phase in PHASES}
    budgets = {"budgets": {"planning": 2, "building": 3, "verification": 1, "delivery": 2}}
    state, _ = await drive(scripted(script, calls), budgets)
    node = state.nodes["agent"]
    assert [p for p, _ in calls].count("building") == 3
    assert node.path == ("exhausted",)
    assert node.outcome is NodeOutcome.GAVE_UP
    assert node.steps == 8
    assert dict(node.counters) == budgets["budgets"]
    assert state.status is RunStatus.FAILED


async def test_a_spent_phase_budget_is_reported_as_an_automatic_phase_change():
    calls: list[tuple[str, int]] = []
    script = {phase: ["work"] * 5 for phase in PHASES}
    script["delivery"] = ["done"]
    agent = phase_action(scripted(script, calls))
    state, history = await drive(agent, {"budgets": {"planning": 2, "building": 1}})
    changed = [(e["previous"], e["auto"]) for h in history for e in h.events]
    assert changed[:2] == [("planning", True), ("building", True)]
    assert state.nodes["agent"].outcome is NodeOutcome.SUCCESS


async def test_advance_event_without_auto_and_fail_ends_the_node():
    calls: list[tuple[str, int]] = []
    state, history = await drive(phase_action(scripted({"building": ["fail"]}, calls)))
    assert state.nodes["agent"].path == ("failed",)
    changed = [e for h in history for e in h.events if e["kind"] == "phase_changed"]
    assert changed == [
        {"kind": "phase_changed", "phase": "building", "previous": "planning", "auto": False}
    ]


@pytest.mark.parametrize("value", [0, -2, "three", True])
async def test_bad_auto_advance_setting_fails_the_node(value):
    calls: list[tuple[str, int]] = []
    state, _ = await drive(
        phase_action(scripted({"planning": ["work"]}, calls)), {"auto_advance_after_steps": value}
    )
    assert state.nodes["agent"].status is NodeStatus.FAILED
    assert "auto_advance_after_steps must be a positive integer" in (
        state.nodes["agent"].error or ""
    )


async def test_resume_continues_in_the_same_phase_with_spent_steps():
    """The phase and its spent steps live in the snapshot: a crash in building resumes in
    building with the budget it had left (nothing committed is redone)."""
    calls: list[tuple[str, int]] = []
    script = {
        "planning": ["work", "advance"],
        "building": ["work", "work", "work", "advance"],
        "delivery": ["done"],
    }
    agent = scripted(script, calls)
    definition = prepared(solo_graph(), {("agent", p): agent for p in PHASES})
    async with MemoryStore() as store:
        eng = engine(store)
        async with eng.start(definition) as run:
            for _ in range(5):  # start, 2 planning steps, 2 building steps
                await run.next()
            run_id = run.run_id
            assert run.state.nodes["agent"].path == ("building",)
            before = len(calls)
        state = await eng.resume(run_id, graph=definition)
    assert state.nodes["agent"].path == ("delivered",)
    assert calls[before] == ("building", 3)
    assert [p for p, _ in calls].count("planning") == 2
    assert [p for p, _ in calls].count("building") == 4


phase_scripts = st.fixed_dictionaries(
    {p: st.lists(st.sampled_from(["work", "work", "advance", "done", "fail"]), max_size=8)
     for p in PHASES}
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=phase_scripts,
    limits=st.fixed_dictionaries({p: st.integers(1, 4) for p in PHASES}),
    auto=st.one_of(st.none(), st.integers(1, 5)),
)
def test_budgets_are_never_exceeded_and_runs_end_within_their_sum(script, limits, auto):
    """Hypothesis: whatever the agent returns, no phase spends more than its budget and the
    node ends within sum(budgets) transitions (the run within that plus start and settle)."""
    calls: list[tuple[str, int]] = []
    agent = phase_action(scripted(script, calls))
    settings_: dict[str, Any] = {"budgets": limits}
    if auto is not None:
        settings_["auto_advance_after_steps"] = auto
    state, _ = asyncio.run(drive(agent, settings_))
    node = state.nodes["agent"]
    assert node.status in {NodeStatus.COMPLETED, NodeStatus.FAILED}
    assert state.status.terminal
    for phase in PHASES:
        assert node.counters.get(phase, 0) <= limits[phase]
        if auto is not None:
            assert [p for p, _ in calls].count(phase) <= min(limits[phase], auto) or (
                phase == "delivery"
            )
    assert node.steps <= sum(limits.values())
    assert state.seq <= sum(limits.values()) + 2


# --------------------------------------------------------------------------- solo_build

BUILD_MACHINES = {
    name: load_machine(name) for name in ("solo_build", "guarded_quality_loop", "quality_loop")
}


def build_graph(settings_: Mapping[str, Any]) -> GraphDef:
    node = NodeDef(id="agent", machine="solo_build", settings=MappingProxyType(dict(settings_)))
    return GraphDef(
        name="build", nodes=(node,), machines=MappingProxyType(BUILD_MACHINES), digest="build"
    )


def cycling(outcomes: Sequence[str]):
    """An action returning ``outcomes`` in turn (``raise`` raises a timeout)."""
    calls = {"n": 0}

    async def action(ctx: ActionContext) -> ActionResult:
        outcome = outcomes[calls["n"] % len(outcomes)]
        calls["n"] += 1
        if outcome == "raise":
            raise TimeoutError("slow tool")
        return ActionResult(trigger=outcome, payload={"message": f"{outcome} #{calls['n']}"})

    return action


BUILD_BUDGETS = ("planning", "verification", "delivery", "think", "verify", "reflect", "retries")
phase_triggers = st.lists(st.sampled_from(["work", "advance"]), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    executes=st.lists(st.sampled_from(["continue", "done", "raise"]), min_size=1, max_size=4),
    verdicts=st.lists(st.sampled_from(["pass", "fail", "raise"]), min_size=1, max_size=4),
    phases=st.fixed_dictionaries({"planning": phase_triggers, "verification": phase_triggers}),
    limits=st.fixed_dictionaries({name: st.integers(1, 3) for name in BUILD_BUDGETS}),
)
def test_solo_build_ends_within_a_bound_derived_from_its_budgets(
    executes, verdicts, phases, limits
):
    """Hypothesis over the coding build (SOLO phases around a quality loop inside a
    fallback chain): no budget is ever exceeded and the node ends within
    planning + (retries + 1) x (think + verify + reflect) + retries + 1 + verification +
    delivery + 1 transitions."""
    actions = {
        ("agent", "planning"): cycling(phases["planning"]),
        ("agent", "execute"): cycling(executes),
        ("agent", "verify"): cycling(verdicts),
        ("agent", "reflect"): quality.reflect,
        ("agent", "recover"): fallback.recover,
        ("agent", "emergency"): fallback.emergency,
        ("agent", "verification"): cycling(phases["verification"]),
        ("agent", "delivery"): cycling(["work", "done"]),
    }

    async def scenario():
        definition = prepared(build_graph({"budgets": limits}), actions)
        async with MemoryStore() as store:
            return await engine(store).run(definition)

    state = asyncio.run(scenario())
    node = state.nodes["agent"]
    assert state.status.terminal
    for key, spent in node.counters.items():
        assert spent <= limits[key.rpartition("/")[2]], key
    loop = limits["think"] + limits["verify"] + limits["reflect"]
    bound = (
        limits["planning"]
        + (limits["retries"] + 1) * loop
        + limits["retries"]
        + 1
        + limits["verification"]
        + limits["delivery"]
        + 1
    )
    assert node.steps <= bound
