"""The fallback_chain machine and its concern actions, driven through the real interpreter.

Scenarios from note 000 (three-tier fallback: U2 emergency rules, U3 chain wiring).
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import TESTS, engine, prepared
from concern_kit import concern_graph, node, path_trail, run_graph, script
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.actions._failures import describe_error
from phasegraph.actions.llm._client import ProviderError
from phasegraph.analysis import Code, Severity, check
from phasegraph.api import Engine
from phasegraph.concerns import fallback
from phasegraph.errors import ActionError, LoopDetectedError, PhasegraphError
from phasegraph.model import NodeOutcome, NodeStatus, RunStatus
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore
from phasegraph.views import run_summary

FIXTURES = TESTS / "fixtures" / "concerns"


def chain_graph(**with_settings):
    return concern_graph([node("work", "fallback_chain", settings=with_settings)])


def chain_actions(main, calls=None):
    recover_calls = [] if calls is None else calls

    async def recover(ctx: ActionContext) -> ActionResult:
        recover_calls.append(ctx)
        return await fallback.recover(ctx)

    return {
        ("work", "main"): main,
        ("work", "recover"): recover,
        ("work", "emergency"): fallback.emergency,
    }


# --------------------------------------------------------------------------- U2: rules


@pytest.mark.parametrize(
    ("error", "code", "retryable"),
    [
        (TimeoutError("model call timed out after 30s"), "timeout", True),
        (LoopDetectedError("read_file repeated"), "loop_detected", True),
        (ProviderError("provider returned 503"), "llm_failure", True),
        (ActionError("cannot start 'make'"), "action_failed", True),
        (ConnectionResetError("connection reset by peer"), "action_failed", True),
        (ValueError("unexpected None"), "internal_error", False),
    ],
)
async def test_each_error_type_maps_to_its_emergency_code(error, code, retryable):
    """000/U2 "each exception type maps to correct error_code"; U3 "main fails (timeout,
    LoopDetectedError, LLMProviderError, generic Exception) → Emergency error_code=..."."""
    state, history = await run_graph(chain_graph(), chain_actions(script([error])))
    structured = state.data["error"]
    assert structured["error_code"] == code
    assert structured["retryable"] is retryable
    assert structured["original_error"] == describe_error(error)
    if not isinstance(error, PhasegraphError):  # the user's exception: type, message, line
        assert structured["original_error"].startswith(f"{type(error).__name__}: {error} (")
        assert "(raised at tests/concern_kit.py:" in structured["original_error"]
    assert structured["suggestions"]
    assert set(structured) == {
        "error_code",
        "message",
        "suggestions",
        "retryable",
        "original_error",
    }
    assert state.nodes["work"].outcome is NodeOutcome.FAILED
    assert state.status is RunStatus.FAILED
    assert path_trail(history, "work")[-2:] == ["emergency", "failed"]


async def test_non_retryable_error_skips_recovery():
    """000/U2 "generic Exception → internal_error, retryable=False": no retry is wasted on it."""
    recovered = []
    state, history = await run_graph(
        chain_graph(), chain_actions(script([KeyError("slot")]), recovered)
    )
    assert recovered == []
    assert path_trail(history, "work") == ["main", "emergency", "failed"]
    assert state.data["error"]["error_code"] == "internal_error"


def test_emergency_error_to_dict_and_message():
    """000/U2 "to_dict() produces all 5 fields"; "to_error_message() formats suggestions"."""
    error = fallback.structured_error({"error_code": "timeout", "message": "took 31s"})
    assert error.to_dict() == {
        "error_code": "timeout",
        "message": fallback.RULES["timeout"].message,
        "suggestions": list(fallback.RULES["timeout"].suggestions),
        "retryable": True,
        "original_error": "took 31s",
    }
    text = error.to_message()
    assert text.startswith(f"{fallback.RULES['timeout'].message} (took 31s) Suggestions: 1) ")
    assert "2) " in text


def test_unknown_code_and_reported_failures_are_classified():
    """000/U2: an unknown code is internal_error; a reported failure is an action failure."""
    assert fallback.structured_error({"error_code": "weird"}).error_code == "internal_error"
    soft = fallback.structured_error({"message": "empty answer"})
    assert (soft.error_code, soft.retryable, soft.original_error) == (
        "action_failed",
        True,
        "empty answer",
    )


async def test_suggestions_can_be_overridden_per_node():
    """000/U2 "config override: custom suggestion list for the timeout rule via config"."""
    definition = chain_graph(suggestions={"timeout": ["Raise the limit."]}, error_key="why")
    state, _ = await run_graph(definition, chain_actions(script([TimeoutError("slow")])))
    assert state.data["why"]["suggestions"] == ["Raise the limit."]
    assert state.data["why"]["error_code"] == "timeout"


async def test_success_leaves_no_structured_error():
    """000/U2 "error_struct=None (default) → matches current behaviour"; U3 happy path:
    main succeeds, no recovery, no emergency."""
    recovered = []
    emergencies = []

    async def emergency(ctx):
        emergencies.append(ctx)
        return await fallback.emergency(ctx)

    actions = {**chain_actions(script(["ok"]), recovered), ("work", "emergency"): emergency}
    state, history = await run_graph(chain_graph(), actions)
    assert "error" not in state.data
    assert recovered == []
    assert emergencies == []
    assert path_trail(history, "work") == ["main", "done"]
    assert state.errors == ()
    assert run_summary(state) == "1/1 nodes succeeded"


# --------------------------------------------------------------------------- U3: the chain


async def test_timeout_then_successful_recovery_ends_recovered():
    """000/U3 "main fails (timeout) → Recovery → succeeds → error_struct=None, output from
    the retry"."""
    calls: list[ActionContext] = []
    main = script(
        [TimeoutError("step took 31s"), ActionResult(trigger="ok", data={"out": 2})], calls
    )
    state, history = await run_graph(chain_graph(), chain_actions(main))
    assert path_trail(history, "work") == ["main", "recovery", "retry", "recovered"]
    assert state.data == {"out": 2}
    assert state.nodes["work"].outcome is NodeOutcome.SUCCESS
    retry_payload = calls[1].payload
    assert retry_payload["failure"]["error_code"] == "timeout"
    assert "step took 31s" in retry_payload["reflection"]
    assert calls[1].state == "retry"
    assert run_summary(state) == "1/1 nodes succeeded, 1 recovered"


async def test_timeout_recovery_exhausted_goes_to_emergency():
    """000/U3 "main fails (timeout) → Recovery fails (exhausted) → Emergency → error_struct
    with error_code=timeout, retryable=True"."""
    state, history = await run_graph(
        chain_graph(), chain_actions(script([TimeoutError("slow"), TimeoutError("slow again")]))
    )
    assert path_trail(history, "work") == ["main", "recovery", "retry", "emergency", "failed"]
    assert state.data["error"]["error_code"] == "timeout"
    assert state.data["error"]["retryable"] is True
    assert state.data["error"]["original_error"].startswith("TimeoutError: slow again (raised at ")


async def test_reported_failure_is_recovered_like_a_raised_one():
    """000/U3 "treat non-success as soft failure → trigger Recovery"."""
    main = script([ActionResult(trigger="fail", payload={"message": "empty answer"}), "ok"])
    state, history = await run_graph(chain_graph(), chain_actions(main))
    assert path_trail(history, "work") == ["main", "recovery", "retry", "recovered"]
    assert state.errors[0].message == "retry 1 of 1 after action_failed: empty answer"


async def test_retries_budget_bounds_recovery():
    """000 R18 "per-layer max retries": with.budgets.retries is max_retries."""
    failures = [ActionError(f"attempt {i}") for i in range(4)]
    recovered: list[ActionContext] = []
    state, _history = await run_graph(
        chain_graph(budgets={"retries": 3}), chain_actions(script([*failures, "ok"]), recovered)
    )
    assert len(recovered) == 3
    assert state.data["error"]["original_error"] == "attempt 3"
    assert [ctx.payload["message"] for ctx in recovered] == ["attempt 0", "attempt 1", "attempt 2"]
    retries = [r.message for r in state.errors if r.state == "recovery"]
    assert retries == [f"retry {n} of 3 after action_failed: attempt {n - 1}" for n in (1, 2, 3)]
    state, _ = await run_graph(
        chain_graph(budgets={"retries": 3}), chain_actions(script([*failures[:3], "ok"]))
    )
    assert state.nodes["work"].outcome is NodeOutcome.SUCCESS
    assert state.nodes["work"].path == ("recovered",)


async def test_recovery_disabled_goes_straight_to_emergency():
    """000/U3 "fallback_chain.recovery.enabled=false → skip Recovery, go directly to
    Emergency"."""
    recovered: list[ActionContext] = []
    state, history = await run_graph(
        chain_graph(recovery={"enabled": False}),
        chain_actions(script([TimeoutError("slow"), "ok"]), recovered),
    )
    assert recovered == []
    assert path_trail(history, "work") == ["main", "emergency", "failed"]
    assert state.data["error"]["error_code"] == "timeout"


async def test_recovery_explicitly_enabled_recovers():
    """000/U3 config: `recovery.enabled: true` behaves like the default."""
    _state, history = await run_graph(
        chain_graph(recovery={"enabled": True}),
        chain_actions(script([TimeoutError("slow"), "ok"])),
    )
    assert path_trail(history, "work")[-1] == "recovered"


async def test_emergency_disabled_reraises_the_original_error():
    """000/U3 "fallback_chain.emergency.enabled=false → re-raise original exception (no
    Emergency)": the node fails with the original error and no structured error exists."""
    state, history = await run_graph(
        chain_graph(emergency={"enabled": False}),
        chain_actions(script([TimeoutError("first"), TimeoutError("model call timed out")])),
    )
    work = state.nodes["work"]
    assert work.status is NodeStatus.FAILED
    assert work.error is not None
    assert work.error.startswith("TimeoutError: model call timed out (raised at ")
    assert "error" not in state.data
    assert path_trail(history, "work") == ["main", "recovery", "retry", "reraise", "reraise"]
    assert history[-1].kind == "fail"
    assert history[-1].result["error"]["error_code"] == "timeout"


async def test_both_tiers_disabled_reraise_at_once():
    """000/U3 config: with recovery and emergency disabled the main error fails the node."""
    state, history = await run_graph(
        chain_graph(recovery={"enabled": False}, emergency={"enabled": False}),
        chain_actions(script([ActionError("503 from provider")])),
    )
    assert path_trail(history, "work")[:2] == ["main", "reraise"]
    assert state.nodes["work"].error == "503 from provider"
    assert history[-1].result["error"]["error_code"] == "action_failed"


async def test_recovery_and_emergency_write_error_log_records():
    """000 + 004: every failure, recovery and emergency becomes an error-log record."""
    state, _ = await run_graph(
        chain_graph(), chain_actions(script([TimeoutError("slow"), TimeoutError("slower")]))
    )
    kinds = [(r.state, r.severity) for r in state.errors]
    assert kinds == [
        ("main", "error"),  # the interpreter's record of the raised error
        ("recovery", "warning"),  # the recovery attempt
        ("retry", "error"),
        ("emergency", "critical"),  # the structured error
        ("failed", "error"),  # the node's failure
    ]
    emergency = state.errors[3]
    assert emergency.details["error_code"] == "timeout"
    assert "Suggestions: 1)" in emergency.message
    assert not any(r.recovered for r in state.errors)


async def test_cancellation_cancels_the_run_and_is_never_classified():
    """000/U3 "main fails (TaskCancelledError) → NOT routed to Emergency": the action
    cancelled itself, so the run ends cancelled where it stood."""
    async with MemoryStore() as store:
        eng = engine(store)
        definition = chain_graph()
        actions = chain_actions(script([asyncio.CancelledError()]))
        state = await eng.run(prepared(definition, actions))
    assert state.status is RunStatus.CANCELLED
    assert state.nodes["work"].path == ("main",)
    assert state.nodes["work"].status is NodeStatus.CANCELLED
    assert state.errors == ()
    assert "error" not in state.data


async def test_nested_quality_loop_in_the_main_state_recovers(tmp_path):
    """000/U3 "Integration: full chain on a real agent (main fails, recovery succeeds)",
    with the quality loop nested in the chain's main work (YAML graph, python actions)."""
    async with MemoryStore() as store:
        eng = Engine(store)
        state = await eng.run(
            str(FIXTURES / "guarded_graph.yaml"), {"answers": [1, 2, 3, 4], "expected": 3}
        )
        history = await eng.history(state.run_id)
    assert state.status is RunStatus.COMPLETED
    assert state.data["report"] == "accepted 3"
    trail = path_trail(history, "build")
    # Attempt 1: answer 1 fails, reflect, answer 2 fails: the loop gives up → recovery.
    assert trail[:6] == [
        "main/execute",
        "main/verify",
        "main/reflect",
        "main/execute",
        "main/verify",
        "recovery",
    ]
    assert trail[-3:] == ["retry/execute", "retry/verify", "recovered"]
    assert run_summary(state) == "2/2 nodes succeeded, 1 recovered"
    assert [r.state for r in state.errors] == ["main/reflect", "recovery"]


# --------------------------------------------------------------------------- properties

_FAILURES = {
    "timeout": (lambda: TimeoutError("t"), "timeout"),
    "loop": (lambda: LoopDetectedError("l"), "loop_detected"),
    "llm": (lambda: ProviderError("a"), "llm_failure"),
    "action": (lambda: ActionError("a"), "action_failed"),
    "internal": (lambda: RuntimeError("i"), "internal_error"),
    "soft": (lambda: ActionResult(trigger="fail", payload={"message": "s"}), "action_failed"),
}


def _expected(outcomes, retries, recovery_on, emergency_on):
    """A reference model of the chain: (final state, error code of the last failure)."""
    used = 0
    for index, outcome in enumerate(outcomes):
        if outcome == "ok":
            return ("done" if index == 0 else "recovered"), None
        code = _FAILURES[outcome][1]
        worth = outcome == "soft" or code != "internal_error"
        if recovery_on and worth and used < retries:
            used += 1
            continue
        return ("failed" if emergency_on else "reraise"), code
    raise AssertionError("outcomes ran out")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outcomes=st.lists(st.sampled_from([*_FAILURES, "ok"]), min_size=5, max_size=5),
    retries=st.integers(0, 3),
    recovery_on=st.booleans(),
    emergency_on=st.booleans(),
)
def test_chain_terminates_within_budget_and_matches_reference(
    outcomes, retries, recovery_on, emergency_on
):
    """Properties: every run of the chain terminates within 2 * retries + 2 transitions,
    never spends more than `retries`, and ends as the reference model says."""
    outcomes = [*outcomes[:4], "ok"]  # the last attempt always exists
    steps = [o if o == "ok" else _FAILURES[o][0]() for o in outcomes]
    flags = {"budgets": {"retries": retries}}
    if not recovery_on:
        flags["recovery"] = {"enabled": False}
    if not emergency_on:
        flags["emergency"] = {"enabled": False}
    state, history = asyncio.run(run_graph(chain_graph(**flags), chain_actions(script(steps))))
    final, code = _expected(outcomes, retries, recovery_on, emergency_on)
    work = state.nodes["work"]
    assert work.path[-1] == final
    assert work.steps <= 2 * retries + 2
    for record in history:
        for changed in record.nodes.values():
            assert changed.counters.get("retries", 0) <= retries
    if final == "failed":
        assert state.data["error"]["error_code"] == code
    if final == "reraise":
        assert history[-1].result["error"]["error_code"] == code
    assert (work.outcome is NodeOutcome.SUCCESS) == (final in {"done", "recovered"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.sampled_from(["timeout", "loop", "llm", "soft"]), max_size=3),
    retries=st.integers(3, 4),
)
def test_emergency_never_classifies_a_cancellation(before, retries):
    """Property: whatever failed before, a cancellation raised by the main work cancels
    the run; nothing classifies it, nothing reaches the emergency."""
    steps = [_FAILURES[o][0]() for o in before] + [asyncio.CancelledError()]

    async def scenario():
        async with MemoryStore() as store:
            eng = engine(store)
            definition = chain_graph(budgets={"retries": retries})
            await eng.run(prepared(definition, chain_actions(script(steps))))
            return await eng.get("run-1"), await eng.history("run-1")

    state, history = asyncio.run(scenario())
    trail = path_trail(history, "work")
    assert "emergency" not in trail
    assert "reraise" not in trail
    assert state.nodes["work"].status is NodeStatus.CANCELLED
    assert history[-1].kind == "cancel"
    assert not any("Cancelled" in str(r.details) for r in state.errors)
    assert "error" not in state.data


def test_shipped_machine_loads_with_its_budget():
    """The built-in machine declares the retries budget (default max_retries 1)."""
    machine = load_machine("fallback_chain")
    assert machine.budgets["retries"].limit == 1
    assert {"main", "recover", "emergency"} == {s.hook for s in machine.states.values() if s.hook}


# ------------------------------------------------- the emergency's key and `writes:`

SHELL_CHAIN = """
graph: shell_chain
nodes:
  - id: build
    machine: fallback_chain
    writes: [result]
    {settings}
    bind:
      main:
        shell: ["sh", "-c", "echo no compiler here >&2; exit 3"]
        on_exit: {{0: ok, default: fail}}
      recover: {{python: "phasegraph.concerns.fallback:recover"}}
      emergency: {{python: "phasegraph.concerns.fallback:emergency"}}
"""


def _shell_chain(tmp_path, settings=""):
    path = tmp_path / "shell_chain.yaml"
    path.write_text(SHELL_CHAIN.format(settings=settings))
    return path


@pytest.mark.parametrize(("settings", "key"), [("", "error"), ("with: {error_key: why}", "why")])
async def test_emergency_records_its_error_on_a_node_that_declares_writes(tmp_path, settings, key):
    """The emergency's key is declared by the concern, so `writes: [result]` does not refuse
    it, and `check` passes the graph `run` accepts."""
    path = _shell_chain(tmp_path, settings)
    assert check(path).findings == ()
    state = await engine(MemoryStore()).run(str(path), {})
    assert state.nodes["build"].error is None
    structured = state.data[key]
    assert structured["error_code"] == "action_failed"
    assert structured["original_error"] == "command 'sh' exited with status 3: no compiler here"
    assert structured["suggestions"] == list(fallback.ACTION_SUGGESTIONS["shell"])
    assert state.errors[0].message == (
        "retry 1 of 1 after action_failed: command 'sh' exited with status 3: no compiler here"
    )


async def test_a_python_action_reporting_fail_is_an_action_failure_not_a_model_one():
    """Nothing here called a model: the error must not blame one."""
    state, _ = await run_graph(chain_graph(), chain_actions(script(["fail", "fail"])))
    structured = state.data["error"]
    assert structured["error_code"] == "action_failed"
    assert structured["original_error"].startswith("the main work returned 'fail' without a")
    assert not any("model" in text for text in structured["suggestions"])
    assert "llm_failure" not in state.errors[0].message


def test_check_refuses_two_parallel_chains_whose_emergencies_write_one_key(tmp_path):
    """Both emergencies write `error`: a conflict `run` would meet, so `check` reports it."""
    text = SHELL_CHAIN.format(settings="")
    second = (
        text.split("nodes:\n", 1)[1]
        .replace("id: build", "id: test")
        .replace("[result]", "[report]")
    )
    path = tmp_path / "two.yaml"
    path.write_text(text + second)
    errors = [f for f in check(path).findings if f.severity is Severity.ERROR]
    assert [f.code for f in errors] == [Code.NOT_RUNNABLE]
    assert "nodes 'build' and 'test' may run at the same time and both write 'error'" in (
        errors[0].message
    )
    assert errors[0].location is not None
    assert errors[0].location.line == 14
