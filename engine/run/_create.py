"""Creating a run: its seq 0 committed under a lease taken for it.

Every way a run comes to be — ``start``, ``fork``, the server and workers (which call
those) — creates it here, with :func:`create_run`.
"""

from __future__ import annotations

from typing import Final

from phasegraph.errors import RunStateError, SequenceConflictError
from phasegraph.model import RunState, StepRecord
from phasegraph.run._lease import Hold, LeaseKeeper
from phasegraph.run._stored import first_commit
from phasegraph.store.base import Store

__all__ = ["Created", "create_run"]


# A plain class, not a dataclass: defining a dataclass costs every run's start more
# (dataclasses writes and compiles its methods) than it saves here.
class Created:
    """A run just created, its lease still held.

    Attributes:
        hold: The run's lease: drive the run under it, or release it.
        snapshot_bytes: The size of the seq-0 snapshot (what the checkpoint policy weighs
            the run's records against).
    """

    __slots__ = ("hold", "snapshot_bytes")

    def __init__(self, hold: Hold, snapshot_bytes: int) -> None:
        self.hold: Final = hold
        self.snapshot_bytes: Final = snapshot_bytes


async def create_run(
    store: Store, leases: LeaseKeeper, state: RunState, record: StepRecord | None = None
) -> Created:
    """Commit ``state`` as seq 0 of a new run, under a lease taken for it and kept.

    Args:
        store: Where the run is kept.
        leases: Takes the new run's lease.
        state: The run's seq-0 state (:func:`~phasegraph.run.initial_state` or
            :func:`~phasegraph.run.fork_state`).
        record: Its seq-0 record (default: a plain ``created`` record at the state's
            creation time).

    Returns:
        The lease (the caller releases it) and the size of the seq-0 snapshot.

    Raises:
        CodecError: A value of the state cannot be stored (a fork's patch value, say):
            the message names the path to it; nothing was written.
        RunStateError: A run with that id exists already.
        LeaseHeldError: Someone holds a lease on that run id.
        StoreError: The store failed; nothing was written.
    """
    if record is None:
        record = StepRecord(seq=0, time=state.created_at, kind="created")
    commit = first_commit(state, record)
    hold = await leases.acquire(state.run_id)
    try:
        await store.commit(hold.lease, commit)
    except SequenceConflictError as exc:
        await hold.release()
        raise RunStateError(
            f"run id {state.run_id!r} is taken: a run with that id exists already (choose "
            "another id, or omit it for a fresh one)",
            run_id=state.run_id,
        ) from exc
    except BaseException:
        await hold.release()  # never raises: a lease we fail to release just expires
        raise
    return Created(hold, len(commit.snapshot or b""))
