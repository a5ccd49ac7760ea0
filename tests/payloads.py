"""Run states and records with every field set: shared by the codec tests and its benchmark.

Also ``shape``, the types of a value all the way down, which the read tests compare too.

The golden files in ``tests/golden/`` are these values encoded: change them and the golden
bytes change with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

from phasegraph.model import (
    Actor,
    Effect,
    ErrorRecord,
    Interrupt,
    LedgerEntry,
    NodeOutcome,
    NodeState,
    NodeStatus,
    OnUnknown,
    Plan,
    PlanItem,
    RunState,
    RunStatus,
    StepRecord,
    Value,
    replace,
)

T0 = datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
T1 = datetime(2025, 3, 1, 11, 0, tzinfo=timezone(timedelta(hours=2)))  # non-UTC offset


CALL = LedgerEntry(
    id="run-0001:review:2:1",
    index=1,
    tool="run_command",
    arguments=MappingProxyType({"argv": ["make", "deploy"]}),
    effect=Effect.IDEMPOTENT,
    on_unknown=OnUnknown.RETRY,
    result=MappingProxyType({"exit": 0, "stdout": "ok"}),
)
"""A ledger entry with every field set to something other than its default."""


PLAN = Plan(
    hook="children",
    version=2,
    items=(
        PlanItem(id="build", value=MappingProxyType({"id": "build", "argv": ["make"]})),
        PlanItem(id="test", needs=("build",), value="run the tests", version=2),
    ),
    members=("build", "test"),
    limit=2,
)
"""A plan with every field set to something other than its default (a second version)."""


def golden_state() -> RunState:
    """A run state with every field set to something other than its default."""
    state = golden_state_v7()
    retry = replace(state.nodes["review"], retried=3)
    return replace(state, nodes=MappingProxyType({**state.nodes, "review": retry}))


def golden_state_v7() -> RunState:
    """The golden run state of format 7, whose nodes retried nothing."""
    return replace(golden_state_v6(), definition="9c1f" * 16)


def golden_state_v6() -> RunState:
    """The golden run state of format 6, pinned to no stored definition."""
    state = golden_state_v5()
    child = NodeState(
        status=NodeStatus.COMPLETED,
        path=("done",),
        outcome=NodeOutcome.SUCCESS,
        steps=1,
        result={"passed": 12, "log": ["ok"]},
    )
    nodes = MappingProxyType({**state.nodes, "review.build": child})
    return replace(state, nodes=nodes, plans=MappingProxyType({"review": PLAN}))


def golden_state_v5() -> RunState:
    """The golden run state of formats 4 and 5, which had no plans."""
    state = golden_state_v3()
    gate = replace(state.interrupts[GATE], reviewers=("local:ana", "group:release"), seq=state.seq)
    return replace(state, interrupts=MappingProxyType({GATE: gate}))


GATE = "run-0001:review:spec_review"
"""The golden run's open gate."""


def golden_state_v3() -> RunState:
    """The golden run state of format 3, whose gates named no reviewers nor their step."""
    state = golden_state_v2()
    review = replace(state.nodes["review"], ledger=(CALL,))
    return replace(state, nodes=MappingProxyType({**state.nodes, "review": review}))


def golden_state_v2() -> RunState:
    """The golden run state of formats 1 and 2, which had no ledgers."""
    return RunState(
        run_id="run-0001",
        graph="review",
        graph_source="graphs/review.yaml",
        graph_digest="sha256:5f1d",
        seq=7,
        status=RunStatus.WAITING,
        input=MappingProxyType({"task": "fix the build", "limits": {"think": 7}}),
        data=MappingProxyType(
            {
                "plan": ["read", "edit", "test"],
                "score": 0.75,
                "blob": b"\x00\xff",
                "when": T1,
                "nested": {"b": None, "a": True, "n": -(2**40)},
            }
        ),
        nodes=MappingProxyType(
            {
                "plan": NodeState(
                    status=NodeStatus.COMPLETED,
                    path=("done",),
                    outcome=NodeOutcome.SUCCESS,
                    counters=MappingProxyType({"think": 3}),
                    steps=4,
                ),
                "review": NodeState(
                    status=NodeStatus.WAITING,
                    path=("review_pending", "ask"),
                    counters=MappingProxyType({"verify": 1, "reflect": 0}),
                    steps=2,
                    error="timeout once",
                    payload=MappingProxyType({"feedback": "add tests"}),
                ),
            }
        ),
        interrupts=MappingProxyType(
            {
                "run-0001:review:spec_review": Interrupt(
                    id="run-0001:review:spec_review",
                    node="review",
                    kind="review",
                    payload=MappingProxyType({"spec": "v2", "files": ["a.py"]}),
                    deadline=T1 + timedelta(minutes=30),
                    created_at=T1,
                    parked=True,
                )
            }
        ),
        errors=(
            ErrorRecord(
                time=T0,
                node="plan",
                state="think",
                message="provider timed out",
                severity="warning",
                recovered=True,
                details=MappingProxyType({"error_code": "timeout", "retryable": True}),
            ),
        ),
        writers=MappingProxyType({"plan": ("plan",), "score": ("plan", "review")}),
        created_at=T0,
        updated_at=T1,
    )


def golden_record() -> StepRecord:
    """A step record with every field set to something other than its default."""
    record = golden_record_v6()
    retry = replace(record.nodes["review"], retried=2)
    return replace(record, nodes=MappingProxyType({"review": retry}))


def golden_record_v6() -> StepRecord:
    """The golden record of format 6, whose nodes retried nothing."""
    return replace(golden_record_v5(), plan=PLAN)


def golden_record_v5() -> StepRecord:
    """The golden record of formats 4 and 5, which carried no plan."""
    return replace(golden_record_v3(), actor=Actor(name="local:ana", groups=("release",)))


def golden_record_v3() -> StepRecord:
    """The golden record of format 3, which named no actor."""
    node = NodeState(status=NodeStatus.RUNNING, path=("executing",), ledger=(CALL,))
    return replace(golden_record_v2(), ledger=CALL, nodes=MappingProxyType({"review": node}))


def golden_record_v2() -> StepRecord:
    """The golden record of format 2, which had no ledgers."""
    return replace(golden_record_v1(), appended=MappingProxyType({"plan": ["ship", {"by": "ana"}]}))


def golden_record_v1() -> StepRecord:
    """The golden record of format 1, which had no ``appended`` (its default: empty)."""
    state = golden_state_v2()
    return StepRecord(
        seq=8,
        time=T1 + timedelta(seconds=1),
        kind="transition",
        node="review",
        source=("review_pending", "ask"),
        trigger="confirm",
        dest=("executing",),
        result=MappingProxyType({"trigger": "confirm", "payload": {"ok": True}, "output": None}),
        data=MappingProxyType({"approved": True, "reviewer": "ana"}),
        nodes=MappingProxyType(
            {"review": NodeState(status=NodeStatus.RUNNING, path=("executing",))}
        ),
        status=RunStatus.COMPLETED,
        errors=state.errors,
        interrupts=MappingProxyType({}),
        events=(
            MappingProxyType({"type": "spec_review_reply", "id": "run-0001:review:spec_review"}),
        ),
    )


def loop_record(seq: int = 7) -> StepRecord:
    """A record as a looping node writes it: the common case on a history read."""
    node = NodeState(
        status=NodeStatus.RUNNING,
        path=("work",),
        counters=MappingProxyType({"steps": seq}),
        steps=seq - 1,
    )
    return StepRecord(
        seq=seq,
        time=T0 + timedelta(milliseconds=seq),
        kind="transition",
        node="loop",
        source=("work",),
        trigger="again",
        dest=("work",),
        result=MappingProxyType({"trigger": "again"}),
        nodes=MappingProxyType({"loop": node}),
    )


def shape(value: Any) -> Any:
    """The types of ``value`` all the way down (equality alone lets a dict pass for a proxy)."""
    if isinstance(value, Value):
        names = value.__struct_fields__
        return type(value), tuple((name, shape(getattr(value, name))) for name in names)
    if isinstance(value, Mapping):
        return type(value), tuple(sorted((key, shape(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return type(value), tuple(shape(item) for item in value)
    return type(value)


# Every key a format-5 record or node state leaves out when empty or nil, with the value
# format 4 wrote for it (specs/snapshot-format.md).
FORMAT_4_RECORD_KEYS: Mapping[str, Any] = MappingProxyType(
    {
        "a": {},
        "d": {},
        "dst": [],
        "e": [],
        "ev": [],
        "i": None,
        "l": None,
        "n": None,
        "ns": {},
        "r": {},
        "src": [],
        "tr": None,
    }
)
FORMAT_4_NODE_KEYS: Mapping[str, Any] = MappingProxyType(
    {"c": {}, "e": None, "l": [], "o": None, "pl": {}}
)


def format_4_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A raw format-5 record body as format 4 wrote it: every key present."""
    nodes = {key: {**FORMAT_4_NODE_KEYS, **node} for key, node in body.get("ns", {}).items()}
    return {**FORMAT_4_RECORD_KEYS, **body, "ns": nodes}
