"""When a step's commit also carries a full snapshot of the run state.

Every commit carries the step's record (what the step changed); some also carry a full
snapshot. A read of the head decodes the last snapshot and applies every record since
(what ``Engine.get`` and every resume pay), so snapshots bound reads; but each one
rewrites the whole state, so they cost writes. :class:`CheckpointPolicy` weighs the two
from three numbers: steps since the last snapshot, the bytes of the records written
since, and the size of the state that snapshot stands for. :class:`Checkpoints` keeps
those numbers for one run being written and encodes the snapshot when one is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from phasegraph import codec
from phasegraph.codec import _chunks
from phasegraph.model import RunState

__all__ = ["CheckpointPolicy", "Checkpoints"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointPolicy:
    """When a commit carries a full snapshot (see :meth:`due`).

    Attributes:
        every: The interval, in steps: a snapshot is considered once this many steps
            were committed since the last one.
        large_share: At the interval, a snapshot is written once the records since add
            up to this share of the state's size, so a large state that hardly changes
            is not rewritten every interval.
        max_intervals: ...but never more than this many intervals apart, which bounds how
            many records a read applies.
        small_ratio: A state the records since outweigh this many times over is written
            before its interval is up: for a state smaller than a few records, writing it
            again costs less than what reads pay for the records, and adds at most
            ``1 / small_ratio`` to the bytes written. A run of tiny steps is then read in
            a dozen records, not 63.
        small_wait: ...but not before ``every // small_wait`` steps (at least one).
    """

    every: int = 64
    large_share: float = 0.5
    max_intervals: int = 8
    small_ratio: int = 8
    small_wait: int = 8

    def due(self, *, steps: int, record_bytes: int, snapshot_bytes: int) -> bool:
        """Whether the commit of this step carries a full snapshot.

        Args:
            steps: Steps since the last snapshot, this one included.
            record_bytes: Bytes of the records since the last snapshot, this one's included.
            snapshot_bytes: The size of the state the last snapshot stands for.
        """
        if steps >= self.every:
            large_enough = record_bytes >= self.large_share * snapshot_bytes
            return large_enough or steps >= self.max_intervals * self.every
        small = record_bytes >= self.small_ratio * snapshot_bytes
        return small and steps >= max(self.every // self.small_wait, 1)

    def earliest(self) -> int:
        """The fewest steps since the last snapshot at which :meth:`due` can say yes."""
        return min(self.every, max(self.every // self.small_wait, 1))


@final
class Checkpoints:
    """Where one run's last full snapshot stands, and the snapshot of the next commit.

    Args:
        policy: When a snapshot is due.
        seq: The seq of the run's last snapshot.
        size: The size of the state that snapshot stands for (its bytes and those of the
            list segments it refers to).
        cache: Node chunks and list segments of that snapshot, so the next one encodes
            only what changed since (``None``: made at the first snapshot).
    """

    __slots__ = ("_cache", "_earliest", "_policy", "_record_bytes", "_seq", "_size")

    def __init__(
        self,
        policy: CheckpointPolicy,
        *,
        seq: int,
        size: int,
        cache: _chunks.SnapshotCache | None = None,
    ) -> None:
        self._policy = policy
        self._earliest = policy.earliest()  # before this, due() is not asked (a step each)
        self._seq = seq
        self._size = size
        self._record_bytes = 0
        self._cache = cache

    def snapshot(self, state: RunState, record: bytes) -> bytes | None:
        """The snapshot the commit of ``state``'s step carries, if one is due.

        Args:
            state: The run state after the step.
            record: The step's encoded record.
        """
        self._record_bytes += len(record)
        steps = state.seq - self._seq
        if steps < self._earliest or not self._policy.due(
            steps=steps, record_bytes=self._record_bytes, snapshot_bytes=self._size
        ):
            return None
        if self._cache is None:
            self._cache = _chunks.SnapshotCache()
        return codec.encode_snapshot(state, self._cache)

    def committed(self, seq: int, snapshot: bytes) -> None:
        """The snapshot :meth:`snapshot` gave for ``seq`` was committed."""
        assert self._cache is not None  # made by the snapshot() that encoded it
        self._cache.accept(seq)
        # What a read decodes, and what the policy weighs records against.
        self._size = len(snapshot) + self._cache.referred
        self._seq, self._record_bytes = seq, 0
