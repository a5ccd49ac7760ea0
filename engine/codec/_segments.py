"""Long lists of run data written once, in segments that later snapshots refer to.

A conversation grows by a few items a step. Records carry only what a step appended
(``StepRecord.appended``); snapshots would still rewrite the whole list each time. So a
list of at least :data:`SEGMENT_MIN_BYTES` is written as a *segment*: the snapshot
holds only the items added since the last snapshot that wrote this key, and refers to
the earlier snapshots (by seq, with their item counts) for the items before them. Each
item is then written once by the records and once by a snapshot, and never again while
the list only grows. A list that changes other than at its end is written whole once
more, and so is a list after :data:`MAX_REFS` segments, so a read never fetches more
than that many snapshots.

The writer's side is :class:`ListLayouts` (one per run being written, inside the
:class:`~phasegraph.codec.SnapshotCache`); the reader's side is :func:`join`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from phasegraph import model
from phasegraph.errors import CodecError

__all__ = ["MAX_REFS", "SEGMENT_MIN_BYTES", "Layout", "ListLayouts", "join"]

SEGMENT_MIN_BYTES: Final = 4096
"""A list whose encoded items reach this size is written in segments."""

MAX_REFS: Final = 32
"""The most earlier segments one snapshot refers to for one key (then it starts anew)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """How a written snapshot holds one list: its segments, in order.

    Attributes:
        segments: ``(snapshot seq, item count)`` of each segment, first items first.
        size: The encoded bytes of all segments together.
        items: The list as written (to recognise it, extended, next time).
    """

    segments: tuple[tuple[int, int], ...]
    size: int
    items: list[Any] | tuple[Any, ...]


@final
class ListLayouts:
    """The segment layout of the long lists in the last snapshot a run committed."""

    __slots__ = ("_committed", "_pending", "_pending_seq")

    def __init__(self) -> None:
        self._committed: dict[str, Layout] = {}
        self._pending: dict[str, Layout] = {}
        self._pending_seq = -1

    def plan(
        self,
        seq: int,
        data: Mapping[str, Any],
        encode_items: Callable[[str, list[Any] | tuple[Any, ...]], bytes],
    ) -> tuple[dict[str, Any], dict[str, tuple[bytes, list[tuple[int, int]]]], int]:
        """Split the data of the snapshot at ``seq`` into plain keys and segmented lists.

        Returns:
            The plain keys, each segmented key → (its new items encoded, its refs), and
            the bytes of the earlier segments referred to. The layout becomes the one
            later snapshots build on once :meth:`accept` says this snapshot was committed.
        """
        plain: dict[str, Any] = {}
        lists: dict[str, tuple[bytes, list[tuple[int, int]]]] = {}
        pending: dict[str, Layout] = {}
        referred = 0
        for key, value in data.items():
            if type(value) is not list and type(value) is not tuple:
                plain[key] = value
                continue
            known = self._committed.get(key)
            if (
                known is not None
                and len(known.segments) < MAX_REFS
                and model.extension(known.items, value) is not None
            ):
                start = sum(count for _, count in known.segments)
                refs, size = known.segments, known.size
            else:
                start, refs, size = 0, (), 0
            encoded = encode_items(key, value[start:] if start else value)
            if not refs and len(encoded) < SEGMENT_MIN_BYTES:
                plain[key] = value
                continue
            own = len(value) - start
            lists[key] = (encoded, list(refs))
            referred += size
            segments = (*refs, (seq, own)) if own else refs
            pending[key] = Layout(segments, size + len(encoded), value)
        self._pending, self._pending_seq = pending, seq
        return plain, lists, referred

    def accept(self, seq: int) -> None:
        """The snapshot at ``seq`` was committed: later snapshots may refer to its segments."""
        if seq == self._pending_seq:
            self._committed, self._pending, self._pending_seq = self._pending, {}, -1

    def adopt(self, layouts: Mapping[str, Layout]) -> None:
        """Continue from a snapshot read back (a resumed run): refer to its segments."""
        self._committed = dict(layouts)
        self._pending, self._pending_seq = {}, -1


def join(
    seq: int,
    key: str,
    items: list[Any],
    refs: list[tuple[int, int]],
    segment: Callable[[int, str], list[Any]],
) -> list[Any]:
    """The whole list a snapshot's segment stands for.

    Args:
        seq: The seq of the snapshot being read.
        key: The data key.
        items: The snapshot's own items for ``key``.
        refs: ``(seq, count)`` of the earlier segments, in order.
        segment: The items of ``key`` held by the snapshot at a seq.

    Raises:
        CodecError: A referred segment is not an earlier one or has another item count.
    """
    whole: list[Any] = []
    for ref, count in refs:
        if not 0 <= ref < seq:
            raise CodecError(
                f"snapshot.lists[{key!r}] refers to the snapshot at seq {ref}, "
                f"which is not an earlier one"
            )
        part = segment(ref, key)
        if len(part) != count:
            raise CodecError(
                f"snapshot.lists[{key!r}]: the snapshot at seq {ref} holds {len(part)} "
                f"items of it, not {count}"
            )
        whole += part
    whole += items
    return whole
