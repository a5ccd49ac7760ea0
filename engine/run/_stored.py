"""Run state ⇄ what a store keeps.

Reading a run at a seq (its snapshot, the snapshots that snapshot refers to for long
lists, and the records after it), naming an unreadable or missing payload, the indexed
metadata of a state, and the commit that creates a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from phasegraph import codec
from phasegraph.codec import _chunks, _envelope, _history
from phasegraph.errors import CodecError
from phasegraph.model import RunState, StepRecord, apply_records
from phasegraph.store.base import Commit, RunMeta, Store, StoredRun

__all__ = [
    "Loaded",
    "decode_history",
    "decode_stored",
    "first_commit",
    "history_json",
    "load",
    "rebuild",
    "run_meta",
]


T = TypeVar("T")

_JSON_PAGE: Final = 256
"""Records :func:`history_json` renders at a time."""


# A plain class, not a dataclass: defining a dataclass costs every run's start more
# (dataclasses writes and compiles its methods) than it saves here.
class Loaded:
    """A run read at a seq, with what a writer continuing it needs.

    Attributes:
        stored: What the store returned.
        state: The run state at ``stored.seq``.
        snapshots: A snapshot cache that knows the read snapshot's list segments, so the
            next snapshot refers to them rather than writing the lists again.
        snapshot_bytes: The size of the state the read snapshot stands for (its bytes
            and those of the segments it refers to).
    """

    __slots__ = ("snapshot_bytes", "snapshots", "state", "stored")

    def __init__(
        self,
        stored: StoredRun,
        state: RunState,
        snapshots: _chunks.SnapshotCache,
        snapshot_bytes: int,
    ) -> None:
        self.stored: Final = stored
        self.state: Final = state
        self.snapshots: Final = snapshots
        self.snapshot_bytes: Final = snapshot_bytes


async def load(store: Store, run_id: str, seq: int | None = None) -> Loaded:
    """Read the run state at ``seq`` (default: the head).

    Raises:
        RunNotFoundError: No such run, or no such seq in it.
        CodecError: A stored payload is corrupt, of a newer format
            (``UnsupportedFormatError``) or missing; the message names the run and seq.
    """
    stored = await store.read(run_id, seq)
    snapshot = decode_stored(run_id, stored.snapshot_seq, stored.snapshot, _envelope.read_snapshot)
    referred: dict[int, bytes] = {}
    if snapshot.needs:
        reads = await asyncio.gather(*(store.read(run_id, need) for need in snapshot.needs))
        for need, got in zip(snapshot.needs, reads, strict=True):
            if got.snapshot_seq != need:
                raise _unreadable(
                    run_id,
                    stored.snapshot_seq,
                    "snapshot",
                    CodecError(f"it refers to a snapshot at seq {need}, which is missing"),
                )
            referred[need] = got.snapshot
    try:
        state = snapshot.state(referred)
    except CodecError as exc:
        raise _unreadable(run_id, stored.snapshot_seq, "snapshot", exc) from exc
    state = _apply(run_id, state, stored)
    cache = _chunks.SnapshotCache()
    cache.lists.adopt(snapshot.layouts())
    size = len(stored.snapshot) + sum(map(len, referred.values()))
    return Loaded(stored, state, cache, size)


def rebuild(stored: StoredRun) -> RunState:
    """The run state a read stands for: its snapshot with the following records applied.

    Only for a snapshot that stands alone (no long list kept in segments): :func:`load`
    reads any run.

    Raises:
        CodecError: A stored payload is corrupt or missing, or the snapshot refers to
            others; the message names the run and the seq.
    """
    run_id = stored.meta.run_id
    state = decode_stored(run_id, stored.snapshot_seq, stored.snapshot, codec.decode_snapshot)
    return _apply(run_id, state, stored)


def _apply(run_id: str, state: RunState, stored: StoredRun) -> RunState:
    """``state`` (at the read's snapshot) with the read's records applied, holes refused.

    The records are folded at once (:func:`~phasegraph.model.apply_records`): a head
    read builds one run state, not one per record since the snapshot.
    """
    first = stored.snapshot_seq + 1
    records = decode_history(run_id, list(enumerate(stored.records, first)), first)
    if stored.snapshot_seq + len(records) != stored.seq:
        raise missing_record(run_id, stored.snapshot_seq + len(records) + 1, None)
    return apply_records(state, records)


def missing_record(run_id: str, seq: int, found: int | None) -> CodecError:
    """The error for a hole in a run's journal: the record at ``seq`` is not stored."""
    where = f" (the next stored one is seq {found})" if found is not None else ""
    return CodecError(
        f"run {run_id!r}: the step record at seq {seq} is missing from the store{where}; "
        "the run's journal has a hole, so its state after that step cannot be rebuilt",
        run_id=run_id,
        seq=seq,
    )


def decode_stored(run_id: str, seq: int, blob: bytes, decode: Callable[[bytes], T]) -> T:
    """Decode a stored payload with ``decode``; a refusal names the run and the seq.

    Raises:
        CodecError: The payload is corrupt (``UnsupportedFormatError``, of the same class
            as the codec raised, when it was written by a newer format).
    """
    try:
        return decode(blob)
    except CodecError as exc:
        what = "step record" if decode is codec.decode_record else "snapshot"
        raise _unreadable(run_id, seq, what, exc) from exc


def decode_history(
    run_id: str, stored: Sequence[tuple[int, bytes]], start: int = 0
) -> list[StepRecord]:
    """Decode the ``(seq, record bytes)`` of a history read, in one synchronous block.

    A history is read by the thousand records: they are decoded in one loop of the
    codec's, and their seqs checked in one comparison; only a read that fails goes
    through them one by one, to name the record.

    Args:
        run_id: The run.
        stored: What the store's history yielded.
        start: The first seq asked for: the records must follow on from it, one per seq.

    Raises:
        CodecError: A record is corrupt, of a newer format or missing; the message names
            the run and the seq.
    """
    try:
        records = _envelope.decode_records([blob for _, blob in stored])
    except CodecError:
        records = None  # decoded one by one below, to name the record
    expected = range(start, start + len(stored))
    if records is not None and [seq for seq, _ in stored] == [r.seq for r in records] == [
        *expected
    ]:
        return records  # the usual read: every record readable, one per seq
    for want, (seq, blob) in zip(expected, stored, strict=True):
        try:
            record = codec.decode_record(blob)
        except CodecError as exc:
            raise _unreadable(run_id, seq, "step record", exc) from exc
        if seq != want or record.seq != seq:
            raise missing_record(run_id, want, seq if seq != want else record.seq)
    raise AssertionError("unreachable: the records above were found in order")


def history_json(run_id: str, stored: Sequence[tuple[int, bytes]], start: int = 0) -> bytes:
    """The JSON ``phasegraph history --json`` prints of a history read, in one synchronous block.

    The text (UTF-8) is the ``StepRecord`` of every record :func:`decode_history` decodes
    (:mod:`phasegraph.codec`'s history renderer), with the same errors; it is made from
    the stored bytes with no step record built, :data:`_JSON_PAGE` records at a time
    (what one page of records and their views hold stays in the processor's caches).

    Args:
        run_id: The run.
        stored: What the store's history yielded.
        start: The first seq asked for: the records must follow on from it, one per seq.

    Raises:
        CodecError: A record is corrupt, of a newer format or missing; the message names
            the run and the seq.
    """
    pages: list[bytes] = []
    expected = start
    for first in range(0, len(stored), _JSON_PAGE):
        page = stored[first : first + _JSON_PAGE]
        bodies = _read_bodies(run_id, page, expected)
        expected += len(page)
        pages.append(_history.history_page_json(bodies))
    return _history.history_json(pages)


def _read_bodies(
    run_id: str, pairs: Sequence[tuple[int, bytes]], expected: int
) -> list[_envelope.RecordBody]:
    """The record bodies of ``(seq, bytes)`` pairs, checked to follow on from ``expected``.

    All are read at once; when one is unreadable they are read again one by one, in seq
    order, so the error names the first problem (as :func:`decode_history` would).

    Raises:
        CodecError: The first record that is unreadable or missing, named.
    """
    try:
        read: list[_envelope.RecordBody] | None = _envelope.read_records(
            [blob for _, blob in pairs]
        )
    except CodecError:
        read = None
    bodies = []
    for index, (seq, blob) in enumerate(pairs):
        if read is not None:
            body = read[index]
        else:
            try:
                body = _envelope.read_record(blob)
            except CodecError as exc:
                raise _unreadable(run_id, seq, "step record", exc) from exc
        if seq != expected or body.seq != seq:
            raise missing_record(run_id, expected, seq if seq != expected else body.seq)
        bodies.append(body)
        expected += 1
    return bodies


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
