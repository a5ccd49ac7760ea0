"""The checkpoint policy: a run's commits skip asking it before its earliest step."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from phasegraph.run._checkpoint import CheckpointPolicy

policies = st.builds(
    CheckpointPolicy,
    every=st.integers(1, 200),
    large_share=st.floats(0, 4),
    max_intervals=st.integers(1, 10),
    small_ratio=st.integers(0, 16),
    small_wait=st.integers(1, 300),
)


@given(policies, st.integers(0, 400), st.integers(0, 10**6), st.integers(0, 10**6))
def test_no_snapshot_is_due_before_the_earliest_step(
    policy: CheckpointPolicy, steps: int, record_bytes: int, snapshot_bytes: int
) -> None:
    due = policy.due(steps=steps, record_bytes=record_bytes, snapshot_bytes=snapshot_bytes)
    if steps < policy.earliest():
        assert not due


@given(policies)
def test_the_earliest_step_can_be_due(policy: CheckpointPolicy) -> None:
    """The bound is tight: at the earliest step, records large enough make it due."""
    steps = policy.earliest()
    assert policy.due(steps=steps, record_bytes=10**9, snapshot_bytes=1)
