"""Run metadata as a backend stored it, checked before anyone formats or sorts it.

A store's metadata is plain columns or hash fields that a disk fault, a hand edit or
another program can leave holding anything. Reading one run, such metadata is a
:class:`~phasegraph.errors.StoreError` naming the run and the field; listing runs, it
marks that one run unreadable (:attr:`RunMeta.unreadable`) and lists the others as usual.
So does a journal that does not end at the run's head (its last record deleted, or its
head rolled back), which every read of the run refuses: a listing does not show such a
run as if it were whole.
"""

from __future__ import annotations

import math
from typing import Final

from phasegraph._vocabulary import RunStatus
from phasegraph.errors import StoreError
from phasegraph.model import replace
from phasegraph.store._open import journal_head_problem
from phasegraph.store.base import RunMeta

__all__ = ["RUN_STATUSES", "listed", "listed_meta", "stored_meta", "stored_seq"]

RUN_STATUSES: Final = frozenset(status.value for status in RunStatus)
"""Every status a run can have, as stored."""


def _text(field: str, value: object) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{field} is not UTF-8 text") from None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} is {value!r:.40}, not a name")
    return value


def _number(field: str, value: object, kind: type[int] | type[float]) -> float:
    number: float | None = None
    if isinstance(value, bytes):
        try:
            number = kind(value.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            number = None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value if kind is float or isinstance(value, int) else None
    if number is None or not math.isfinite(number) or number < 0:
        what = "a step number" if kind is int else "a time"
        raise ValueError(f"{field} is {value!r:.40}, not {what}")
    return number


def _checked(run_id: str, values: tuple[object, ...]) -> RunMeta:
    """Raises ValueError saying which field is bad."""
    graph, status, seq, created_at, updated_at = values
    status_text = _text("status", status)
    if status_text not in RUN_STATUSES:
        raise ValueError(f"status is {status_text!r:.40}, not a run status")
    return RunMeta(
        run_id=run_id,
        graph=_text("graph", graph),
        status=status_text,
        seq=int(_number("seq", seq, int)),
        created_at=float(_number("created_at", created_at, float)),
        updated_at=float(_number("updated_at", updated_at, float)),
    )


def _unreadable(run_id: str, exc: ValueError) -> StoreError:
    return StoreError(
        f"run {run_id!r} has unreadable metadata ({exc}): the store was changed outside "
        "phasegraph or damaged; restore it from a backup",
        run_id=run_id,
    )


def stored_seq(run_id: str, value: object) -> int:
    """A run's stored head seq.

    Raises:
        StoreError: It is not a step number; names the run.
    """
    try:
        return int(_number("seq", value, int))
    except ValueError as exc:
        raise _unreadable(run_id, exc) from None


def stored_meta(run_id: str, values: tuple[object, ...]) -> RunMeta:
    """The metadata of one run being read: ``(graph, status, seq, created_at, updated_at)``.

    Raises:
        StoreError: A field holds something no commit writes; names the run and the field.
    """
    try:
        return _checked(run_id, values)
    except ValueError as exc:
        raise _unreadable(run_id, exc) from None


def listed_meta(run_id: str, values: tuple[object, ...], last: int) -> RunMeta:
    """As :func:`stored_meta`, but a run that cannot be read is marked so, not an error.

    Args:
        run_id: The run.
        values: Its stored ``(graph, status, seq, created_at, updated_at)``.
        last: The seq of its last stored step record (-1: none is).

    Returns:
        Its metadata, marked unreadable (see :func:`listed`) when a field holds what no
        commit writes (the other fields are then placeholders) or its journal does not
        end at its head.
    """
    try:
        meta = _checked(run_id, values)
    except ValueError as exc:
        return RunMeta.unreadable_run(run_id, f"{exc} (changed outside phasegraph, or damaged)")
    return listed(meta, last)


def listed(meta: RunMeta, last: int) -> RunMeta:
    """``meta`` as a listing shows it: marked unreadable if its journal does not end at its head.

    The metadata itself is readable, so it is kept (the listing's order holds); the mark
    says how the journal is wrong, as a read of the run would refuse it.

    Args:
        meta: The run's metadata, read and checked.
        last: The seq of its last stored step record (-1: none is).
    """
    if last == meta.seq:
        return meta
    why = f"{journal_head_problem(meta.seq, last)}: changed outside phasegraph, or damaged"
    return replace(meta, unreadable=why)
