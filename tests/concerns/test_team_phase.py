"""Team-DAG phases: the ``team_phase`` machine, rollback, checkpoints, concurrency, resume.

Scenarios of source note 000 (U4: phase rollback with validation/rollback commands and
checkpoint ordering), note 003 (U2 concurrency limit, U7 phase-level checkpoint and
resume, AE1, AE3) and note 001 (U9 team collaboration surfaces failure), each driven
through the real interpreter on a memory store.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import TESTS, engine, prepared
from concern_kit import events_of
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.concerns import team
from phasegraph.errors import SpecError
from phasegraph.model import GraphDef, NodeDef, NodeOutcome, NodeStatus, RunStatus
from phasegraph.spec import load_graph, load_machine
from phasegraph.store import open_store
from phasegraph.store.memory import MemoryStore

TEAM = load_machine("team_phase")
FIXTURES = TESTS / "fixtures" / "concerns"
Run = Callable[[ActionContext], Awaitable[ActionResult]]
Phase = tuple[str, Sequence[str], Mapping[str, Any]]


def team_graph(phases: Sequence[Phase], *, concurrency: int = 3, reducer: bool = True) -> GraphDef:
    nodes = tuple(
        NodeDef(id=i, machine="team_phase", needs=tuple(n), settings=MappingProxyType(dict(s)))
        for i, n, s in phases
    )
    return GraphDef(
        name="team",
        nodes=nodes,
        machines=MappingProxyType({"team_phase": TEAM}),
        concurrency=concurrency,
        reducers=MappingProxyType({"checkpoints": "merge"} if reducer else {}),
        digest="team",
    )


def team_actions(runs: Mapping[str, Run]) -> dict[tuple[str, str], Run]:
    actions: dict[tuple[str, str], Run] = {}
    for node_id, run in runs.items():
        actions[(node_id, "run")] = run
        actions[(node_id, "validate")] = team.validate
        actions[(node_id, "rollback")] = team.rollback
        actions[(node_id, "checkpoint")] = team.checkpoint
    return actions


def ok(data: Mapping[str, Any] | None = None) -> Run:
    async def run(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(0)
        return ActionResult(trigger="ok", data=dict(data or {}))

    return run


def fail(**payload: Any) -> Run:
    async def run(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="fail", payload={"reason": "tests failed", **payload})

    return run


async def drive(phases: Sequence[Phase], runs: Mapping[str, Run], *, concurrency: int = 3):
    definition = prepared(team_graph(phases, concurrency=concurrency), team_actions(runs))
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(definition)
        history = await eng.history(state.run_id)
    return state, history


def visited(history, node: str) -> list[str]:
    return [r.dest[-1] for r in history if r.node == node and r.kind in {"start", "transition"}]


ROLLBACK = {"validation_command": "false", "rollback_command": "true"}


# --------------------------------------------------------------------------- rollback


async def test_no_rollback_configured_keeps_the_old_behaviour():
    """Note 000 U4 characterization (opt-in default): a phase fails with no rollback
    configured → no command runs, the failure is recorded and the checkpoint is written."""
    state, history = await drive(
        [("p", [], {}), ("after", ["p"], {})], {"p": fail(), "after": ok()}
    )
    assert visited(history, "p") == ["running", "checkpointing_failed", "failed"]
    assert state.data["checkpoints"]["p"] == {
        "phase": "p",
        "status": "failed",
        "reason": "tests failed",
        "rolled_back": False,
    }
    assert state.nodes["after"].status is NodeStatus.SKIPPED
    assert not events_of(history, team.ROLLBACK_STARTED)
    assert [e.node for e in state.errors] == ["p"]


async def test_validation_alone_is_not_enough_to_roll_back():
    """Rollback needs both commands: with only a validation_command nothing runs."""
    state, history = await drive([("p", [], {"validation_command": "false"})], {"p": fail()})
    assert visited(history, "p") == ["running", "checkpointing_failed", "failed"]
    assert state.data["checkpoints"]["p"]["status"] == "failed"


async def test_validation_passes_so_no_rollback_and_checkpoint_saved():
    """Note 000 U4: rollback configured, validation passes (exit 0) → rollback NOT run,
    checkpoint saved."""
    settings_ = {"validation_command": "true", "rollback_command": "false"}
    state, history = await drive([("p", [], settings_)], {"p": fail()})
    assert visited(history, "p") == ["running", "validating", "checkpointing_failed", "failed"]
    assert state.data["checkpoints"]["p"]["validation"] == "passed"
    assert state.data["checkpoints"]["p"]["rolled_back"] is False
    assert not events_of(history, team.ROLLBACK_STARTED)


async def test_validation_fails_rollback_succeeds_then_checkpoint_saved():
    """Note 000 U4: validation fails, rollback succeeds → rollback executed, checkpoint
    saved; phase_rollback_started precedes phase_rollback_completed (KTD8 ordering)."""
    state, history = await drive([("p", [], ROLLBACK)], {"p": fail()})
    assert visited(history, "p") == [
        "running", "validating", "rolling_back", "checkpointing_failed", "failed",
    ]  # fmt: skip
    kinds = [e["kind"] for r in history for e in r.events if e["kind"].startswith("phase_")]
    assert kinds == [team.ROLLBACK_STARTED, team.ROLLBACK_COMPLETED]
    assert events_of(history, team.ROLLBACK_STARTED)[0]["rollback_command"] == "true"
    record = state.data["checkpoints"]["p"]
    assert record == {
        "phase": "p",
        "status": "failed",
        "reason": "tests failed",
        "rolled_back": True,
        "validation": "failed",
    }
    assert [(e.severity, e.node) for e in state.errors] == [("warning", "p"), ("error", "p")]
    assert "rolled back with 'true'" in state.errors[0].message


async def test_rollback_fails_so_no_checkpoint_and_failed_event():
    """Note 000 U4 (R21): validation fails, rollback fails (exit 1) → rollback executed,
    checkpoint NOT saved, phase_rollback_failed emitted."""
    settings_ = {"validation_command": "false", "rollback_command": "false"}
    state, history = await drive([("p", [], settings_), ("q", [], {})], {"p": fail(), "q": ok()})
    assert visited(history, "p") == ["running", "validating", "rolling_back", "failed"]
    assert "p" not in state.data["checkpoints"]
    assert state.data["checkpoints"]["q"]["status"] == "completed"
    failed = events_of(history, team.ROLLBACK_FAILED)
    assert len(failed) == 1
    assert failed[0]["result"]["exit"] == 1
    assert not events_of(history, team.ROLLBACK_COMPLETED)
    assert state.errors[0].severity == "critical"
    assert team.checkpointed(state.data, "p") is None


async def test_commands_time_out_and_count_as_failed():
    """Note 000 U4 executor timeout: `sleep 10` with a 0.2 s timeout does not pass."""
    settings_ = {"validation_command": "sleep 10", "rollback_command": "sleep 10"}
    state, history = await drive([("p", [], {**settings_, "command_timeout": 0.2})], {"p": fail()})
    assert visited(history, "p")[-1] == "failed"
    assert events_of(history, team.ROLLBACK_FAILED)[0]["result"]["timed_out"] == 0.2
    assert "checkpoints" not in state.data


async def test_a_command_that_cannot_start_is_a_failed_rollback():
    settings_ = {"validation_command": "false", "rollback_command": "no-such-program-pg x"}
    state, history = await drive([("p", [], settings_)], {"p": fail()})
    failed = events_of(history, team.ROLLBACK_FAILED)
    assert "cannot start 'no-such-program-pg'" in failed[0]["result"]["error"]
    assert "checkpoints" not in state.data


async def test_raised_error_takes_the_rollback_path_too():
    async def explode(ctx: ActionContext) -> ActionResult:
        raise ValueError("disk on fire")

    state, history = await drive([("p", [], ROLLBACK)], {"p": explode})
    assert visited(history, "p")[1:3] == ["validating", "rolling_back"]
    reason = state.data["checkpoints"]["p"]["reason"]
    assert reason.startswith(
        "ValueError: disk on fire (raised at tests/concerns/test_team_phase.py:"
    )


def git(repo: Path, *argv: str) -> str:
    done = subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    (tmp_path / "schema.sql").write_text("create table users (id int);\n")
    git(tmp_path, "add", "schema.sql")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "i")
    return tmp_path


async def test_git_checkout_rolls_back_a_tracked_file_the_failed_phase_changed(repo: Path):
    """Note 000 U4 integration (real git repository): the phase modifies a tracked file and
    fails; validation `git diff --quiet` fails; `git checkout -- FILE` restores it."""
    original = (repo / "schema.sql").read_text()

    async def migrate(ctx: ActionContext) -> ActionResult:
        await ctx.tool("write_file", cwd=str(repo), path="schema.sql", text="drop table users;\n")
        return ActionResult(trigger="fail", payload={"reason": "migration broke the schema"})

    settings_ = {
        "validation_command": "git diff --quiet -- schema.sql",
        "rollback_command": "git checkout -- schema.sql",
        "command_cwd": "{repo}",
    }
    definition = prepared(
        team_graph([("migrate", [], settings_)]), team_actions({"migrate": migrate})
    )
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(definition, {"repo": str(repo)})
        history = await eng.history(state.run_id)
    assert (repo / "schema.sql").read_text() == original
    assert git(repo, "status", "--porcelain") == ""
    assert state.data["checkpoints"]["migrate"]["rolled_back"] is True
    assert len(events_of(history, team.ROLLBACK_COMPLETED)) == 1


# --------------------------------------------------------------------------- retries


async def test_retryable_failure_is_retried_while_attempts_last():
    """Note 003 AE1: phase 3 of 5 fails on a rate limit → retried, the task completes."""
    attempts: list[int] = []

    async def flaky(ctx: ActionContext) -> ActionResult:
        attempts.append(ctx.counters["attempts"])
        if len(attempts) == 1:
            return ActionResult(trigger="fail", payload={"retryable": True, "reason": "429"})
        return ActionResult(trigger="ok")

    phases = [(f"p{i}", [f"p{i - 1}"] if i else [], {}) for i in range(5)]
    phases[2] = ("p2", ["p1"], {"budgets": {"attempts": 2}})
    runs = {f"p{i}": ok() for i in range(5)} | {"p2": flaky}
    state, _ = await drive(phases, runs)
    assert attempts == [1, 2]
    assert state.status is RunStatus.COMPLETED
    assert sorted(state.data["checkpoints"]) == [f"p{i}" for i in range(5)]


async def test_retries_stop_when_attempts_run_out_and_non_retryable_never_retries():
    calls: list[str] = []

    def counting(node: str, **payload: Any) -> Run:
        async def run(ctx: ActionContext) -> ActionResult:
            calls.append(node)
            return ActionResult(trigger="fail", payload=payload)

        return run

    attempts = {"budgets": {"attempts": 3}}
    state, _ = await drive(
        [("flaky", [], attempts), ("broken", [], attempts)],
        {"flaky": counting("flaky", retryable=True), "broken": counting("broken")},
    )
    assert calls.count("flaky") == 3
    assert calls.count("broken") == 1
    assert state.nodes["flaky"].counters["attempts"] == 3


# --------------------------------------------------------------------------- concurrency


def gated(live: dict[str, int], release: asyncio.Event, *, raise_error: bool = False) -> Run:
    async def run(ctx: ActionContext) -> ActionResult:
        live["now"] += 1
        live["peak"] = max(live["peak"], live["now"])
        if live["now"] >= live["expect"]:
            release.set()  # as many phases as the limit allows are running together
        try:
            await asyncio.wait_for(release.wait(), 2.0)
            await asyncio.sleep(0.005)
        finally:
            live["now"] -= 1
        return ActionResult(trigger="fail" if raise_error else "ok")

    return run


@pytest.mark.parametrize(
    ("width", "limit", "peak"),
    [(3, 3, 3), (5, 3, 3), (5, 1, 1), (4, 2, 2)],
    ids=["3-phases-all-parallel", "5-phases-at-most-3", "limit-1-is-serial", "4-experts-limit-2"],
)
async def test_phases_of_a_layer_run_under_the_concurrency_limit(width, limit, peak):
    """Note 003 U2: phases of one layer run in parallel but never more than the limit
    (3 of 3 all run together; 5 with limit 3 → at most 3; limit 1 → serial)."""
    live = {"now": 0, "peak": 0, "expect": min(width, limit)}
    release = asyncio.Event()
    phases = [(f"p{i}", [], {}) for i in range(width)]
    state, _ = await drive(
        phases, {f"p{i}": gated(live, release) for i in range(width)}, concurrency=limit
    )
    assert live["peak"] == peak
    assert state.status is RunStatus.COMPLETED


async def test_a_failed_phase_frees_its_slot():
    """Note 003 U2 error path: a failing phase releases its slot; the others still run."""
    live = {"now": 0, "peak": 0, "expect": 2}
    release = asyncio.Event()
    runs = {"bad": gated(live, release, raise_error=True)}
    runs |= {f"p{i}": gated(live, release) for i in range(3)}
    phases = [("bad", [], {})] + [(f"p{i}", [], {}) for i in range(3)]
    state, _ = await drive(phases, runs, concurrency=2)
    assert state.nodes["bad"].status is NodeStatus.FAILED
    assert all(state.nodes[f"p{i}"].status is NodeStatus.COMPLETED for i in range(3))
    assert live["peak"] == 2


# --------------------------------------------------------------------------- checkpoints


async def test_each_completed_phase_is_checkpointed():
    """Note 003 U7: after three phases complete there is a checkpoint for each (with the
    phase's id and status); a phase that never ran has none."""
    phases = [("a", [], {}), ("b", ["a"], {}), ("c", ["b"], {})]
    state, history = await drive(phases, {n: ok({n: True}) for n in "abc"})
    assert {k: v["status"] for k, v in state.data["checkpoints"].items()} == dict.fromkeys(
        "abc", "completed"
    )
    saved = [r.node for r in history if r.trigger == "saved"]
    assert saved == ["a", "b", "c"]
    assert team.checkpointed(state.data, "c") == {"phase": "c", "status": "completed"}
    assert team.checkpointed(state.data, "zzz") is None
    assert team.checkpointed({}, "a") is None


async def test_checkpoints_accumulate_without_a_reducer_when_phases_are_ordered():
    """A checkpoint adds to the mapping, so phases in sequence need no reducer."""
    phases = [("a", [], {}), ("b", ["a"], {})]
    definition = prepared(team_graph(phases, reducer=False), team_actions({"a": ok(), "b": ok()}))
    async with MemoryStore() as store:
        state = await engine(store).run(definition)
    assert sorted(state.data["checkpoints"]) == ["a", "b"]


async def test_concurrent_phases_without_a_reducer_are_told_to_declare_one():
    """Phases that may run together must merge their checkpoints: the error says how."""
    phases = [("a", [], {}), ("b", [], {})]
    definition = prepared(team_graph(phases, reducer=False), team_actions({"a": ok(), "b": ok()}))
    async with MemoryStore() as store:
        state = await engine(store).run(definition)
    assert state.status is RunStatus.FAILED
    errors = " ".join(n.error or "" for n in state.nodes.values())
    assert "declare a reducer for 'checkpoints'" in errors


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_resume_after_a_crash_skips_checkpointed_phases(backend: str, tmp_path: Path):
    """Note 003 AE3/U7: a 10-phase team task crashes during phase 7; resume continues
    from phase 7 and completes; phases 1-6 (checkpointed) never run again. With SQLite the
    resume opens the store afresh, as a new process would."""
    calls: list[str] = []
    crash_in = asyncio.Event()

    def phase(node: str) -> Run:
        async def run(ctx: ActionContext) -> ActionResult:
            calls.append(node)
            if node == "p7" and not crash_in.is_set():
                crash_in.set()
                await asyncio.sleep(3600)  # the process dies while this phase works
            return ActionResult(trigger="ok")

        return run

    phases = [(f"p{i}", [f"p{i - 1}"] if i > 1 else [], {}) for i in range(1, 11)]
    definition = prepared(team_graph(phases), team_actions({n: phase(n) for n, _, _ in phases}))
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url) as store:
        eng = engine(store)
        async with eng.start(definition) as run:
            driver = asyncio.create_task(_drive(run))
            await crash_in.wait()
            driver.cancel()  # the crash: the step in flight is never committed
            with contextlib.suppress(asyncio.CancelledError):
                await driver
            run_id = run.run_id
        crashed = await eng.get(run_id)
        assert sorted(crashed.data["checkpoints"]) == [f"p{i}" for i in range(1, 7)]
        if backend == "memory":
            state = await eng.resume(run_id, graph=definition)
    if backend == "sqlite":
        async with open_store(url) as reopened:
            state = await engine(reopened).resume(run_id, graph=definition)
    assert state.status is RunStatus.COMPLETED
    assert calls == [f"p{i}" for i in range(1, 8)] + [f"p{i}" for i in range(7, 11)]
    assert len(state.data["checkpoints"]) == 10


async def _drive(run) -> None:
    async for _ in run:
        pass


async def test_crash_between_work_and_checkpoint_reruns_only_the_checkpoint():
    """The checkpoint has its own step: a crash after the phase's work was committed
    resumes at the checkpoint and never redoes the work."""
    calls: list[str] = []

    async def work(ctx: ActionContext) -> ActionResult:
        calls.append(ctx.node_id)
        return ActionResult(trigger="ok", data={"built": True})

    definition = prepared(team_graph([("p", [], {})]), team_actions({"p": work}))
    async with MemoryStore() as store:
        eng = engine(store)
        async with eng.start(definition) as run:
            await run.next()  # start
            await run.next()  # work done: running --ok--> checkpointing
            assert run.state.nodes["p"].path == ("checkpointing",)
            run_id = run.run_id
        state = await eng.resume(run_id, graph=definition)
    assert calls == ["p"]
    assert state.data["checkpoints"]["p"]["status"] == "completed"
    assert state.nodes["p"].outcome is NodeOutcome.SUCCESS


# --------------------------------------------------------------------------- team collaboration


async def test_all_phases_failing_surfaces_failure():
    """Note 001 U9: when every phase fails the run fails, each failure is in the error
    log, and nothing silently falls back to a success."""
    phases = [("a", [], {}), ("b", [], {}), ("c", ["a", "b"], {})]
    state, _ = await drive(phases, {"a": fail(), "b": fail(), "c": ok()})
    assert state.status is RunStatus.FAILED
    assert [state.nodes[n].status for n in "abc"] == [
        NodeStatus.FAILED, NodeStatus.FAILED, NodeStatus.SKIPPED,
    ]  # fmt: skip
    assert sorted(e.node for e in state.errors) == ["a", "b"]


def test_an_unknown_team_machine_is_an_error_listing_the_known_ones():
    """Note 001 U9 edge case: the team template is not found → an error naming it and
    listing what exists (never a silent fallback to a single agent)."""
    with pytest.raises(SpecError) as caught:
        load_graph(FIXTURES / "unknown_team_machine.yaml")
    message = str(caught.value)
    assert "team_phaes" in message
    assert "team_phase" in message


def test_team_phase_settings_load_from_yaml():
    """Note 000 U4 serialization: validation/rollback commands round-trip through YAML,
    and a graph without them keeps the plain shape."""
    definition = load_graph(FIXTURES / "team_rollback.yaml")
    nodes = {n.id: n for n in definition.nodes}
    assert nodes["migrate"].settings["rollback_command"] == "git checkout -- schema.sql"
    assert nodes["migrate"].settings["validation_command"] == "git diff --quiet -- schema.sql"
    assert "rollback_command" not in nodes["docs"].settings
    assert definition.reducers["checkpoints"] == "merge"


# --------------------------------------------------------------------------- properties

outcomes = st.sampled_from(["ok", "fail", "retryable", "raise"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(outcomes, min_size=1, max_size=5),
    attempts=st.integers(1, 3),
    validation=st.sampled_from([None, "true", "false"]),
    rollback=st.sampled_from([None, "true", "false"]),
)
def test_attempts_never_exceeded_and_phase_ends_within_its_bound(
    script, attempts, validation, rollback
):
    """Hypothesis: whatever the phase does, attempts never exceed their budget, the node
    finishes within attempts + 3 transitions, and a checkpoint exists unless a rollback
    ran and failed."""
    calls: list[int] = []

    async def run(ctx: ActionContext) -> ActionResult:
        outcome = script[min(len(calls), len(script) - 1)]
        calls.append(1)
        if outcome == "raise":
            raise TimeoutError("slow")
        if outcome == "retryable":
            return ActionResult(trigger="fail", payload={"retryable": True})
        return ActionResult(trigger=outcome)

    settings_: dict[str, Any] = {"budgets": {"attempts": attempts}}
    if validation:
        settings_["validation_command"] = validation
    if rollback:
        settings_["rollback_command"] = rollback
    state, history = asyncio.run(drive([("p", [], settings_)], {"p": run}))
    node = state.nodes["p"]
    assert node.status.terminal
    assert len(calls) == node.counters["attempts"] <= attempts
    assert node.steps <= attempts + 3
    rollback_failed = bool(events_of(history, team.ROLLBACK_FAILED))
    assert ("p" in state.data.get("checkpoints", {})) is not rollback_failed
    if rollback_failed:
        assert (validation, rollback) == ("false", "false")
