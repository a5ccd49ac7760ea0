"""Run state ⇄ what a store keeps.

Rebuilding a read, naming an unreadable payload, the indexed metadata of a state, and the
commit that creates a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from phasegraph import codec
from phasegraph.errors import CodecError
from phasegraph.model import RunState, StepRecord, apply_record
from phasegraph.store.base import Commit, RunMeta, StoredRun

__all__ = ["decode_history", "decode_stored", "first_commit", "rebuild", "run_meta"]


T = TypeVar("T")


def rebuild(stored: StoredRun) -> RunState:
    """The run state a read stands for: its snapshot with the following records applied.

    Raises:
        CodecError: A stored payload is corrupt; the message names the run and the seq.
    """
    run_id = stored.meta.run_id
    state = decode_stored(run_id, stored.snapshot_seq, stored.snapshot, codec.decode_snapshot)
    for offset, blob in enumerate(stored.records, stored.snapshot_seq + 1):
        state = apply_record(state, decode_stored(run_id, offset, blob, codec.decode_record))
    return state


def decode_stored(run_id: str, seq: int, blob: bytes, decode: Callable[[bytes], T]) -> T:
    """Decode a stored payload with ``decode``; a refusal names the run and the seq.

    Raises:
        CodecError: The payload is corrupt (``UnsupportedFormatError``, of the same class
            as the codec raised, when it was written by a newer format).
    """
    try:
        return decode(blob)
    except CodecError as exc:
        what = "snapshot" if decode is codec.decode_snapshot else "step record"
        raise _unreadable(run_id, seq, what, exc) from exc


def decode_history(run_id: str, stored: Sequence[tuple[int, bytes]]) -> list[StepRecord]:
    """Decode the ``(seq, record bytes)`` of a history read, in one synchronous block.

    The collector is paused while thousands of records are built (see
    :func:`~phasegraph.codec.collector_paused`), and the loop calls the codec directly.

    Raises:
        CodecError: A record is corrupt or of a newer format; the message names the run
            and the seq.
    """
    records: list[StepRecord] = []
    append, decode = records.append, codec.decode_record
    with codec.collector_paused():
        for seq, blob in stored:
            try:
                append(decode(blob))
            except CodecError as exc:
                raise _unreadable(run_id, seq, "step record", exc) from exc
    return records


def _unreadable(run_id: str, seq: int, what: str, exc: CodecError) -> CodecError:
    return type(exc)(
        f"run {run_id!r}: the {what} at seq {seq} cannot be read: {exc.message}",
        run_id=run_id,
        seq=seq,
    )


def first_commit(state: RunState, record: StepRecord) -> Commit:
    """The commit of a new run's seq 0: ``record`` and a full snapshot of ``state``."""
    return Commit(
        seq=0,
        record=codec.encode_record(record),
        snapshot=codec.encode_snapshot(state),
        meta=run_meta(state),
    )


def run_meta(state: RunState) -> RunMeta:
    """The indexed metadata a store keeps for ``state``."""
    return RunMeta(
        run_id=state.run_id,
        graph=state.graph,
        status=str(state.status),
        seq=state.seq,
        created_at=state.created_at.timestamp(),
        updated_at=state.updated_at.timestamp(),
    )
