"""The quality_loop machine (execute → verify → reflect → execute), through the interpreter.

Scenarios from note 001 (complex-task quality loop: U4 step budgets, U5 reflexion retry,
KTD-7 resumable counters, KTD-8 gave_up_after_reflections, KTD-9 reset between attempts).
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import engine, prepared, returning
from concern_kit import concern_graph, events_of, node, path_trail, run_graph, script
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns import fallback, quality
from phasegraph.errors import ActionError
from phasegraph.model import NodeOutcome, NodeStatus, RunStatus
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore
from phasegraph.views import run_summary

DEFAULTS = {"think": 7, "verify": 2, "reflect": 1}


def loop_graph(*, with_settings=None, middleware=(), dependent=False):
    nodes = [node("work", "quality_loop", settings=with_settings)]
    if dependent:
        nodes.append(node("ship", "task", needs=["work"]))
    return concern_graph(nodes, middleware=middleware)


def loop_actions(execute, verify, reflect=None, reflect_calls=None):
    calls = [] if reflect_calls is None else reflect_calls

    async def counted_reflect(ctx: ActionContext) -> ActionResult:
        calls.append(ctx)
        return await (reflect or quality.reflect)(ctx)

    return {
        ("work", "execute"): execute,
        ("work", "verify"): verify,
        ("work", "reflect"): counted_reflect,
        ("ship", "run"): returning("ok", {"shipped": True}),
    }


def failing(message="2 tests failed"):
    return ActionResult(trigger="fail", payload={"message": message})


async def test_verify_fail_reflects_then_retry_passes():
    """001 AE1 / U5 happy path: verify fails → reflect → retry within the reflect quota;
    the retry passes verify → completed, and the retry saw the reflection."""
    executes: list[ActionContext] = []
    state, history = await run_graph(
        loop_graph(), loop_actions(script(["done"], executes), script([failing(), "pass"]))
    )
    assert path_trail(history, "work") == [
        "execute",
        "verify",
        "reflect",
        "execute",
        "verify",
        "completed",
    ]
    assert state.nodes["work"].outcome is NodeOutcome.SUCCESS
    assert dict(state.nodes["work"].counters) == {"think": 2, "verify": 2, "reflect": 1}
    second = executes[1].payload
    assert second["failure"]["message"] == "2 tests failed"
    assert "2 tests failed" in second["reflection"]
    assert [(r.state, r.severity) for r in state.errors] == [("reflect", "warning")]
    assert run_summary(state) == "1/1 nodes succeeded, 1 recovered"


async def test_all_retries_fail_gives_up_which_is_a_failure():
    """001 AE1 / KTD-8 "if still fails, marks gave_up_after_reflections": an outcome
    distinct from success that counts as a failure (the dependent node is skipped)."""
    state, _history = await run_graph(
        loop_graph(dependent=True), loop_actions(script(["done"]), script([failing()]))
    )
    work = state.nodes["work"]
    assert work.path == ("gave_up_after_reflections",)
    assert work.outcome is NodeOutcome.GAVE_UP
    assert work.status is NodeStatus.FAILED
    assert state.nodes["ship"].status is NodeStatus.SKIPPED
    assert state.status is RunStatus.FAILED
    assert "shipped" not in state.data
    assert state.errors[-1].details["outcome"] == "gave_up"
    assert run_summary(state) == "0/2 nodes succeeded, 1 failed, 1 skipped"


async def test_passing_task_never_reflects():
    """001 AE2 "simple task doesn't reflexion": a first verify that passes → no reflection."""
    reflections: list[ActionContext] = []
    state, history = await run_graph(
        loop_graph(), loop_actions(script(["done"]), script(["pass"]), reflect_calls=reflections)
    )
    assert reflections == []
    assert path_trail(history, "work") == ["execute", "verify", "completed"]
    assert state.errors == ()


async def test_default_budgets_think_seven_then_forced_verify():
    """001 U4 happy path with the default quotas think=7 / verify=2 / reflect=1: think
    stops at 7 ("think quota exhausted mid-tool-call — finish the step, force verify")."""
    executes: list[ActionContext] = []
    state, history = await run_graph(
        loop_graph(), loop_actions(script(["continue"], executes), script(["pass"]))
    )
    assert len(executes) == 7
    assert [ctx.counters["think"] for ctx in executes] == [1, 2, 3, 4, 5, 6, 7]
    assert executes[0].limits == DEFAULTS
    assert path_trail(history, "work")[-2:] == ["verify", "completed"]
    assert state.nodes["work"].counters["think"] == 7


async def test_node_budgets_override_the_defaults():
    """001 U4: phase_budgets come from the node's with.budgets."""
    executes: list[ActionContext] = []
    await run_graph(
        loop_graph(with_settings={"budgets": {"think": 3}}),
        loop_actions(script(["continue"], executes), script(["pass"])),
    )
    assert len(executes) == 3
    assert executes[0].limits == {**DEFAULTS, "think": 3}


async def test_reflect_quota_zero_means_no_retry():
    """001 U4/U5 edge "reflect quota 0 — no reflection, return best result"."""
    reflections: list[ActionContext] = []
    state, history = await run_graph(
        loop_graph(with_settings={"budgets": {"reflect": 0}}),
        loop_actions(
            script([ActionResult(trigger="done", data={"best": 1})]),
            script([failing()]),
            reflect_calls=reflections,
        ),
    )
    assert reflections == []
    assert path_trail(history, "work") == ["execute", "verify", "gave_up_after_reflections"]
    assert state.data == {"best": 1}


async def test_two_reflections_then_gave_up():
    """001 U5 edge "max_reflections=2 — 2 retry attempts, then gave_up_after_reflections"."""
    reflections: list[ActionContext] = []
    state, _history = await run_graph(
        loop_graph(with_settings={"budgets": {"reflect": 2, "verify": 3}}),
        loop_actions(script(["done"]), script([failing()]), reflect_calls=reflections),
    )
    assert len(reflections) == 2
    assert [ctx.payload["message"] for ctx in reflections] == ["2 tests failed"] * 2
    assert state.nodes["work"].path == ("gave_up_after_reflections",)
    assert state.nodes["work"].counters == {"think": 3, "verify": 3, "reflect": 2}
    assert [r.message[-len("(reflection 1 of 2)") :] for r in state.errors[:2]] == [
        "(reflection 1 of 2)",
        "(reflection 2 of 2)",
    ]


async def test_verify_budget_exhausted_gives_up():
    """001 U4 "verify exhausted → return best result": no verification left is not a pass."""
    state, history = await run_graph(
        loop_graph(with_settings={"budgets": {"reflect": 3, "verify": 1}}),
        loop_actions(script(["done"]), script([failing()])),
    )
    assert path_trail(history, "work") == [
        "execute",
        "verify",
        "reflect",
        "execute",
        "gave_up_after_reflections",
    ]
    assert state.nodes["work"].outcome is NodeOutcome.GAVE_UP


async def test_failing_reflection_is_skipped_and_the_work_retried():
    """001 U5 error path "reflect LLM call fails — skip reflection, retry with existing
    context"."""
    executes: list[ActionContext] = []
    state, history = await run_graph(
        loop_graph(),
        loop_actions(
            script(["done"], executes),
            script([failing(), "pass"]),
            reflect=script([ActionError("reflection model unavailable")]),
        ),
    )
    assert path_trail(history, "work") == [
        "execute",
        "verify",
        "reflect",
        "execute",
        "verify",
        "completed",
    ]
    assert executes[1].payload["error_code"] == "action_failed"
    assert state.nodes["work"].outcome is NodeOutcome.SUCCESS
    assert state.errors[0].message == "reflection model unavailable"


async def test_error_in_execute_ends_errored():
    """001 U5: an execute that raises ends the loop `errored` (outcome failed), logged."""
    state, _history = await run_graph(
        loop_graph(), loop_actions(script([ActionError("tool crashed")]), script(["pass"]))
    )
    assert state.nodes["work"].path == ("errored",)
    assert state.nodes["work"].outcome is NodeOutcome.FAILED
    assert state.errors[0].details["error_code"] == "action_failed"


@pytest.mark.parametrize("checkpoint_every", [1, 64])
async def test_resume_continues_with_the_budgets_left(checkpoint_every):
    """001 KTD-7 / U4 edge "resume after checkpoint — budget counters reconstructed": a run
    stopped after its one reflection resumes with reflect spent, so the next failed verify
    gives up instead of reflecting again."""
    reflections: list[ActionContext] = []
    acts = loop_actions(script(["done"]), script([failing()]), reflect_calls=reflections)
    definition = loop_graph()
    async with MemoryStore() as store:
        eng = engine(store, checkpoint_every=checkpoint_every)
        async with eng.start(prepared(definition, acts)) as run:
            # start, execute → verify, verify → reflect: the crash comes after the reflect step.
            for _ in range(4):
                await run.next()
            run_id = run.run_id
            assert run.state.nodes["work"].counters == {"think": 2, "verify": 1, "reflect": 1}
        stored = await eng.get(run_id)
        assert stored.nodes["work"].counters["reflect"] == 1
        resumed = await eng.resume(run_id, graph=prepared(definition, acts))
    assert len(reflections) == 1
    assert resumed.nodes["work"].path == ("gave_up_after_reflections",)
    assert resumed.nodes["work"].counters == {"think": 2, "verify": 2, "reflect": 1}


async def test_loop_window_reset_between_attempts():
    """001 KTD-9 / U4 "reset() between reflexion attempts — _loop_window cleared" and RV22
    (without it the detector misfires on retry): each attempt repeats the first attempt's
    execute and verify calls exactly. The reflect call empties the node's loop window, so
    the second attempt runs clean; with the reset switched off the retry is flagged, then
    stopped as a loop."""

    async def execute(ctx: ActionContext) -> ActionResult:
        if "step" in ctx.payload:
            return ActionResult(trigger="done")
        return ActionResult(trigger="continue", payload={"step": 1})

    def run_with(config):
        definition = loop_graph(middleware=[("loop_detection", config)])
        return run_graph(definition, loop_actions(execute, script([failing(), "pass"])))

    state, history = await run_with({})
    assert events_of(history, "loop_detected") == []
    assert state.nodes["work"].outcome is NodeOutcome.SUCCESS

    state, history = await run_with({"reset_on": []})
    assert [e["call"] for e in events_of(history, "loop_detected")] == ["execute"]
    assert state.nodes["work"].path == ("errored",)
    codes = [r.details.get("error_code") for r in state.errors]
    assert codes == [None, "loop_detected", None]  # reflection, the loop error, the failure


async def test_gave_up_loop_inside_fallback_chain_is_recovered_once():
    """001 risk "double reflexion with the recovery layer": in a chain around the loop,
    the recovery retries at most `retries` times, each loop entry has its own reflect
    budget, and the total work is bounded."""
    guarded = load_machine("guarded_quality_loop")
    definition = concern_graph([node("work", "guarded_quality_loop")], extra_machines=[guarded])
    reflections: list[ActionContext] = []
    recoveries: list[ActionContext] = []

    async def recover(ctx):
        recoveries.append(ctx)
        return await fallback.recover(ctx)

    acts = loop_actions(script(["done"]), script([failing()]), reflect_calls=reflections)
    acts[("work", "recover")] = recover
    acts[("work", "emergency")] = fallback.emergency
    state, _history = await run_graph(definition, acts)
    assert len(recoveries) == 1
    assert len(reflections) == 2  # one per loop entry (reflect limit 1)
    assert state.nodes["work"].path == ("failed",)
    assert state.data["error"]["error_code"] == "action_failed"
    assert state.data["error"]["original_error"] == "2 tests failed"


# --------------------------------------------------------------------------- properties


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    think=st.integers(1, 6),
    verify=st.integers(1, 4),
    reflect=st.integers(0, 3),
    work=st.lists(st.sampled_from(["continue", "done"]), min_size=1, max_size=12),
    checks=st.lists(st.sampled_from(["pass", "fail"]), min_size=1, max_size=6),
    broken_reflection=st.booleans(),
)
def test_budgets_never_exceeded_and_runs_terminate(
    think, verify, reflect, work, checks, broken_reflection
):
    """Properties: whatever the actions answer, spent budgets never exceed their limits at
    any committed step, the node ends in a final state within think + verify + reflect
    transitions, and it succeeds exactly when a verification passed."""
    budgets = {"think": think, "verify": verify, "reflect": reflect}
    reflection = script([ActionError("no reflection")]) if broken_reflection else None
    acts = loop_actions(script(work), script(checks), reflect=reflection)
    state, history = asyncio.run(run_graph(loop_graph(with_settings={"budgets": budgets}), acts))
    final = state.nodes["work"]
    assert final.outcome is not None
    assert final.steps <= think + verify + reflect
    for record in history:
        for changed in record.nodes.values():
            for name, limit in budgets.items():
                assert changed.counters.get(name, 0) <= limit
    passed = any(r.trigger == "pass" for r in history)
    assert (final.outcome is NodeOutcome.SUCCESS) == passed
    assert final.outcome in {NodeOutcome.SUCCESS, NodeOutcome.GAVE_UP}


def test_shipped_machine_has_the_note_defaults():
    """001 RQ1: think 7 / verify 2 / reflect 1; the give-up state's outcome is gave_up."""
    machine = load_machine("quality_loop")
    assert {name: b.limit for name, b in machine.budgets.items()} == DEFAULTS
    assert machine.states["gave_up_after_reflections"].final is NodeOutcome.GAVE_UP
