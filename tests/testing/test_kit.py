"""Tests for the property kit (phasegraph.testing._contract): the strategies, the scripted actions,
the generated tests on every shipped definition, and planted bugs they must catch."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings

from builders import TESTS
from phasegraph.api import Engine
from phasegraph.model import NodeOutcome, NodeState, RunStatus
from phasegraph.run import Divergence, ReplayReport, prepare
from phasegraph.spec import load_graph
from phasegraph.spec._loader import builtin_graphs, builtin_machines, machine_source
from phasegraph.store.memory import MemoryStore
from phasegraph.testing import (
    Outcome,
    PropertyFailed,
    graph_outcomes,
    graph_properties,
    machine_properties,
    outcomes,
    scripted_actions,
)
from phasegraph.testing import _runs as testing_runs
from phasegraph.testing._runs import machine_subject

CHECK = TESTS / "fixtures" / "check"

# Modest, so the whole suite stays fast; long loops are capped (see budget_cap).
SHIPPED_EXAMPLES = 25
SHIPPED_BUDGET_CAP = 6

# Used exactly as the README shows: pytest collects it like any test function.
test_task_machine_as_a_user_writes_it = machine_properties("task", max_examples=10)


@pytest.mark.parametrize("name", builtin_machines())
def test_shipped_machine_properties(name: str) -> None:
    test = machine_properties(name, max_examples=SHIPPED_EXAMPLES, budget_cap=SHIPPED_BUDGET_CAP)
    test()
    assert test.stats.examples >= 1


@pytest.mark.parametrize("name", builtin_graphs())
def test_shipped_graph_properties(name: str) -> None:
    test = graph_properties(name, max_examples=SHIPPED_EXAMPLES, budget_cap=SHIPPED_BUDGET_CAP)
    test()
    assert test.stats.examples >= 1


# --------------------------------------------------------------------------- planted bugs


def _mutant(tmp_path: Path, change: tuple[str, str]) -> Path:
    text = machine_source("quality_loop").read_text(encoding="utf-8")
    old, new = change
    mutated = re.sub(old, new, text, flags=re.M)
    assert mutated != text, f"the mutation {old!r} no longer applies to quality_loop"
    path = tmp_path / "quality_loop.yaml"
    path.write_text(mutated, encoding="utf-8")
    return path


def _failure(test: object) -> tuple[str, str]:
    with pytest.raises(PropertyFailed) as info:
        test()  # type: ignore[operator]
    return str(info.value), "\n".join(getattr(info.value, "__notes__", []))


def test_kit_catches_a_retry_loop_without_budgets(tmp_path: Path) -> None:
    """Strip quality_loop's budgets (and their guards, and the examples that count them):
    the retry loop may spin forever. Exploration proves it before any example runs, with
    the loop a person can follow."""
    text = machine_source("quality_loop").read_text(encoding="utf-8")
    text = text.partition("\nexamples:\n")[0] + "\n"
    text = re.sub(r"^budgets:\n(?:  .*\n)+", "", text, flags=re.M)
    text = re.sub(r', (?:conditions|unless): \["budget:\w+"\]', "", text)
    path = tmp_path / "quality_loop.yaml"
    path.write_text(text, encoding="utf-8")
    message, _ = _failure(machine_properties(path, max_examples=50))
    assert "does not pass `phasegraph check`" in message
    assert "can loop execute -> execute for ever" in message
    assert "spend_on" in message


def test_kit_catches_a_refused_trigger(tmp_path: Path) -> None:
    """Drop the fallback of `fail` once the reflect budget is spent: the node crashes."""
    fallback = r"^  - \{trigger: fail, source: verify, dest: gave_up_after_reflections\}\n"
    path = _mutant(tmp_path, (fallback, ""))
    message, _ = _failure(machine_properties(path, max_examples=50))
    assert "trigger 'fail' in state 'verify' is refused by every guard" in message
    assert "budget reflect spent" in message
    assert "--fail--> refused" in message


def test_definition_that_fails_check_fails_first() -> None:
    message, _ = _failure(machine_properties(CHECK / "broken" / "trap.yaml", max_examples=5))
    assert "does not pass `phasegraph check`" in message
    assert "state 'limbo'" in message


def test_unbounded_cycle_with_exit_is_reported_by_the_properties() -> None:
    message, _ = _failure(
        machine_properties(CHECK / "broken" / "retry_unbounded.yaml", max_examples=50)
    )
    assert "can loop" in message


# --------------------------------------------------------------------------- strategies


@settings(max_examples=30, deadline=None)
@given(outcomes([load_graph("hello").machines["task"]], max_steps=4))
def test_outcomes_are_short_non_empty_scripts(script: tuple[Outcome, ...]) -> None:
    assert 1 <= len(script) <= 4
    assert all(o.payload == {} for o in script)  # the task machine reads no payload


def test_payload_keys_come_from_payload_predicates() -> None:
    team = machine_subject("team_phase", {}, None).definition

    @settings(max_examples=20, deadline=None)
    @given(graph_outcomes(team))
    def check(script: dict[str, tuple[Outcome, ...]]) -> None:
        assert set(script) == {"team_phase"}
        assert all(set(o.payload) == {"retryable"} for o in script["team_phase"])

    check()


def _run(definition, script):  # type: ignore[no-untyped-def]
    prepared = prepare(definition, definition.name, scripted_actions(definition, script))

    async def scenario():  # type: ignore[no-untyped-def]
        async with MemoryStore() as store:
            engine = Engine(store)
            state = await engine.run(prepared)
            return state, await engine.history(state.run_id)

    return asyncio.run(scenario())


def test_scripted_actions_pick_declared_triggers_by_step() -> None:
    """hello's `plan` declares only ok, so every choice picks ok there; `shout` (a shell
    action: ok or fail, sorted fail, ok) fails on choice 0, which skips `deliver`."""
    definition = load_graph("hello")
    script = {node.id: (Outcome(0),) for node in definition.nodes}
    state, history = _run(definition, script)
    fired = {r.node: r.trigger for r in history if r.kind == "transition"}
    assert fired == {"plan": "ok", "shout": "fail", "count": "ok"}
    assert state.status is RunStatus.FAILED
    assert state.nodes["deliver"].outcome is None
    script = {**script, "shout": (Outcome(1),)}
    state, history = _run(definition, script)
    fired = {r.node: r.trigger for r in history if r.kind == "transition"}
    assert fired == {"plan": "ok", "shout": "ok", "count": "ok", "deliver": "fail"}


def test_scripts_repeat_and_budget_cap_bounds_the_loop() -> None:
    subject = machine_subject("loop", {}, 4)
    assert subject.bounds == {"loop": (4 + 1) * 1}
    state, history = _run(subject.definition, {"loop": (Outcome(0),)})  # always `again`
    node = state.nodes["loop"]
    assert node.outcome is NodeOutcome.FAILED
    assert node.path == ("exhausted",)
    assert [r.trigger for r in history if r.kind == "transition"] == ["again"] * 4


# --------------------------------------------------------------------------- the checks


def test_states_and_budgets_are_checked_at_every_step() -> None:
    subject = machine_subject("loop", {}, 4)
    with pytest.raises(PropertyFailed, match="reached undeclared state 'nowhere'"):
        testing_runs._check_node(subject, "loop", NodeState(path=("nowhere",)), [])
    spent = NodeState(path=("work",), counters={"steps": 5})
    with pytest.raises(
        PropertyFailed, match="spent 5 units of budget 'steps', more than its limit 4"
    ):
        testing_runs._check_node(subject, "loop", spent, [])
    testing_runs._check_node(subject, "loop", NodeState(path=("work",), counters={"steps": 4}), [])


def test_a_resume_that_ends_differently_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    subject = machine_subject("quality_loop", {}, None)
    real = testing_runs._drive_stopping

    async def gives_up_early(engine: Engine, prepared: object, cap: int) -> None:
        await real(engine, prepared, 3)  # type: ignore[arg-type]

    monkeypatch.setattr(testing_runs, "_drive_stopping", gives_up_early)
    script = {"quality_loop": (Outcome(0),)}  # `continue` until think is spent
    with pytest.raises(PropertyFailed, match="ended differently when the run was stopped"):
        asyncio.run(testing_runs.run_example(subject, script, 1))


def test_a_replay_that_diverges_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    subject = machine_subject("task", {}, None)
    real = Engine.replay

    async def diverging(self: Engine, run_id: str, graph: object = None) -> ReplayReport:
        report = await real(self, run_id, graph)  # type: ignore[arg-type]
        recorded = (await self.history(run_id))[2]
        divergence = Divergence(
            seq=2,
            node="task",
            reason="the replayed step differs in dest",
            fields=("dest",),
            recorded=recorded,
            replayed=None,
        )
        return replace(report, divergence=divergence)

    monkeypatch.setattr(Engine, "replay", diverging)
    with pytest.raises(PropertyFailed, match="replays differently: the replayed step differs"):
        asyncio.run(testing_runs.run_example(subject, {"task": (Outcome(0),)}, 64))
