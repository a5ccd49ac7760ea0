"""The live-event log: ids in publication order, kept until the node's step commits.

A property over any interleaving of two nodes' deltas and commits: what the driver keeps
in memory is the newest ``retention`` of the events no commit folded yet, and what a reader
of the durable store folds from the batches holds them: in id order, each once.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from phasegraph.events import EventId
from phasegraph.model import RunState, RunStatus, StepRecord
from phasegraph.run._stream import StreamLog, StreamSettings, decode_batches, unfolded
from phasegraph.store.memory import MemoryStore

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_NODES = ("a", "b")

# A step: ("delta", node) publishes a piece of text; ("commit", node) commits that node's
# step (its turn); ("takeover",) is a new driver (a greater lease token).
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("delta"), st.sampled_from(_NODES)),
        st.tuples(st.just("commit"), st.sampled_from(_NODES)),
        st.just(("takeover",)),
    ),
    max_size=40,
)


def _state(seq: int) -> RunState:
    return RunState(
        run_id="r",
        graph="g",
        graph_source="g.yaml",
        graph_digest="d",
        seq=seq,
        status=RunStatus.RUNNING,
        input={},
        data={},
        nodes={},
        created_at=_T0,
        updated_at=_T0,
    )


@given(steps=_steps, retention=st.integers(1, 50))
async def test_kept_and_stored_live_events_are_the_unfolded_ones_in_order(
    steps: list[tuple[str, ...]], retention: int
) -> None:
    store = MemoryStore()
    log = StreamLog(store, StreamSettings(retention=retention, durable=True, batch=3))
    seq, token = 0, 1
    published, model = [], []  # every event, and what the driver should keep
    moved: dict[str, int] = {}
    for step in steps:
        if step[0] == "delta":
            event = log.publish(_state(seq), token, step[1], "llm_delta", {"text": "x"})
            published.append(event)
            model = [*model, event][-retention:]  # the newest `retention` not folded yet
        elif step[0] == "commit":
            seq += 1
            moved[step[1]] = seq
            log.committed("r", StepRecord(seq=seq, time=_T0, kind="transition", node=step[1]))
            model = unfolded(model, moved, ended=False)  # the node's turn is folded
        else:
            log.forget("r")
            token, model = token + 1, []
    ids = [EventId.of(e) for e in published]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # In memory: the newest `retention` of the driver's events no commit stands for.
    kept = log.retained("r")
    expected = model
    assert (kept[0] if kept is not None else []) == expected
    log.forget("r")  # what is pending is written
    await log.idle()
    stored = unfolded(decode_batches("r", await store.read_stream("r")), moved, ended=False)
    # In the store: at least what the driver kept, in order, once.
    stored_ids = [EventId.of(e) for e in stored]
    assert stored_ids == sorted(set(stored_ids))
    assert set(stored_ids) <= set(ids)
    assert {EventId.of(e) for e in expected} <= set(stored_ids)
