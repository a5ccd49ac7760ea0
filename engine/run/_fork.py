"""Read a run's state at any seq, and fork a new run from it.

:func:`fork_state` turns the state of a run at some seq into the seq-0 state of a new run:
same graph, input, node states, counters, error log and status, with the data patched per
top-level key. The source run is only read, never written.

A fork keeps the source's status at that seq. Forking at a step where the run was still
going gives a run that ``resume`` continues from there (a node whose action was in flight
at that seq runs it again). Forking where the run had already finished gives a finished
copy — to inspect, or to replay against a changed graph — which ``resume`` refuses because
nothing is left to run. To retry a failed step with other data, fork at the seq before it
failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from phasegraph.errors import InputError, RunStateError
from phasegraph.model import Actor, RunState, RunStatus, StepRecord, frozen_map, replace

__all__ = ["fork_state", "nothing_to_resume"]


def nothing_to_resume(run_id: str, status: RunStatus) -> RunStateError:
    """The refusal to resume a run that ended, naming what does what was meant: a fork."""
    retry = "to try again" if status is not RunStatus.COMPLETED else "to go on differently"
    return RunStateError(
        f"run {run_id!r} already {status}; nothing to resume. {retry.capitalize()}, fork "
        f"it from a step before it ended: 'phasegraph fork {run_id} --at SEQ' (its history "
        f"shows each step's SEQ: 'phasegraph history {run_id}')",
        run_id=run_id,
    )


def fork_state(
    source: RunState,
    *,
    run_id: str,
    patch: Mapping[str, Any] | None,
    now: datetime,
    actor: Actor | None = None,
) -> tuple[RunState, StepRecord]:
    """The seq-0 state and record of a run forked from ``source``.

    Args:
        source: The source run's state at the seq to fork from.
        run_id: The new run's id.
        patch: Data keys to set (each replaces the whole top-level value).
        now: The new run's creation time.
        actor: Who forked it (recorded on the seq-0 record), if named.

    Returns:
        The new run's state and its seq-0 record (kind ``created``, whose ``result``
        names the source run, the seq and the patched keys).

    Raises:
        InputError: A patch key is not a non-empty string.
    """
    changes = dict(patch or {})
    bad = [key for key in changes if not isinstance(key, str) or not key]
    if bad:
        raise InputError(
            f"fork of run {source.run_id!r}: bad data keys {bad!r}", run_id=source.run_id
        )
    # Interrupt ids embed the run id; the fork's replies quote the fork's id, and the
    # step that opened its gates is its own first one.
    interrupts = {
        _rekey(item.id, source.run_id, run_id): replace(
            item, id=_rekey(item.id, source.run_id, run_id), seq=0
        )
        for item in source.interrupts.values()
    }
    state = replace(
        source,
        run_id=run_id,
        seq=0,
        data=frozen_map({**source.data, **changes}),
        interrupts=frozen_map(interrupts),
        created_at=now,
        updated_at=now,
    )
    provenance = {"forked_from": source.run_id, "at": source.seq, "patched": sorted(changes)}
    record = StepRecord(
        seq=0,
        time=now,
        kind="created",
        status=state.status,
        result=frozen_map(provenance),
        actor=actor,
    )
    return state, record


def _rekey(interrupt_id: str, old: str, new: str) -> str:
    prefix = f"{old}:"
    return new + interrupt_id[len(old) :] if interrupt_id.startswith(prefix) else interrupt_id
