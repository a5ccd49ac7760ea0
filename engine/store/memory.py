"""An in-process store: dicts in memory, for tests and throwaway runs.

It obeys the whole store contract. Every method runs without awaiting anything, so on
one event loop each call is atomic by construction; the store is not meant to be shared
between processes. Leases are also renewed from the lease keeper's thread, so lease
changes hold a lock. Lease expiry uses ``time.time()``. Definitions are a dict of their
own, digest → bytes, apart from the runs.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import final

from phasegraph.errors import LeaseLostError, StoreError
from phasegraph.store._holder import holder_gone
from phasegraph.store._meta import listed
from phasegraph.store._open import (
    check_commit,
    check_page,
    check_ttl,
    journal_head_error,
    lease_held_error,
    lease_lost_error,
    run_not_found_error,
    sequence_conflict_error,
)
from phasegraph.store.base import Commit, Lease, LeaseLine, Message, RunMeta, Store, StoredRun

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Run:
    """Everything kept for one run id (which may have a lease but no commit yet)."""

    meta: RunMeta | None = None
    records: list[bytes] = field(default_factory=list)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    snapshot_seqs: list[int] = field(default_factory=list)  # ascending, for bisect
    owner: str | None = None  # None: no live holder (released or never taken)
    token: int = 0  # the last token issued
    expires_at: float = 0.0

    @property
    def head(self) -> int:
        return len(self.records) - 1


@dataclass(slots=True)
class _Inbox:
    """One run's messages, in order, and how many of them the run took."""

    messages: list[Message] = field(default_factory=list)
    ids: dict[str, Message] = field(default_factory=dict)
    taken: int = 0


@final
class MemoryStore(Store):
    """A store that keeps runs in process memory; nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._definitions: dict[str, bytes] = {}  # never emptied: no run owns one
        self._inboxes: dict[str, _Inbox] = {}  # run id -> its messages (apart from _runs)
        self._streams: dict[str, list[bytes]] = {}
        self._closed = False
        self._leases = threading.Lock()  # lease changes also come from the keeper's thread

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease; see :meth:`Store.acquire`."""
        check_ttl(ttl)
        self._check_open()
        with self._leases:
            run = self._runs.setdefault(run_id, _Run())
            now = time.time()
            if run.owner is not None and run.expires_at > now and not holder_gone(run.owner):
                raise lease_held_error(run_id, run.owner, run.expires_at)
            run.token += 1
            run.owner = owner
            run.expires_at = now + ttl
            return Lease(
                run_id=run_id, owner=owner, token=run.token, expires_at=run.expires_at, ttl=ttl
            )

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold; see :meth:`Store.renew`."""
        check_ttl(ttl)
        self._check_open()
        return self._renew(lease, ttl)

    def _renew(self, lease: Lease, ttl: float) -> Lease:
        with self._leases:
            run = self._runs.get(lease.run_id)
            # An expired lease nobody took over is still ours: the token is what fences.
            if run is None or run.owner is None or run.token != lease.token:
                raise lease_lost_error(lease, _live_holder(run))
            run.expires_at = time.time() + ttl
            return Lease(
                run_id=lease.run_id,
                owner=lease.owner,
                token=lease.token,
                expires_at=run.expires_at,
                ttl=ttl,
            )

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours; see :meth:`Store.release`."""
        self._check_open()
        with self._leases:
            run = self._runs.get(lease.run_id)
            if run is not None and run.token == lease.token:
                run.owner = None

    async def holder(self, run_id: str) -> str | None:
        """The owner of the run's live lease; see :meth:`Store.holder`."""
        self._check_open()
        return _live_holder(self._runs.get(run_id))

    def lease_line(self) -> LeaseLine:
        """Renewals straight into this store's dicts, under its lease lock."""
        return _MemoryLine(self)

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step atomically; see :meth:`Store.commit`."""
        check_commit(lease, commit)
        self._check_open()
        run = self._runs.get(lease.run_id)
        if run is None or run.owner is None or run.token != lease.token:
            raise lease_lost_error(lease, _live_holder(run))
        now = time.time()
        if run.expires_at <= now:
            with self._leases:  # expired, nobody took it: still ours, taken again
                if run.token == lease.token:
                    run.expires_at = now + lease.ttl
        if commit.seq <= run.head and run.records[commit.seq] == commit.record:
            return  # the same commit again (a retry): already done
        if commit.seq != run.head + 1:
            raise sequence_conflict_error(lease.run_id, commit.seq, run.head)
        run.records.append(commit.record)
        if commit.snapshot is not None:
            run.snapshots[commit.seq] = commit.snapshot
            run.snapshot_seqs.append(commit.seq)
        run.meta = commit.meta

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read a run at ``seq`` (default: head); see :meth:`Store.read`."""
        run, meta = self._run(run_id)
        target = run.head if seq is None else seq
        if not 0 <= target <= run.head:
            raise run_not_found_error(run_id, seq=target, head=run.head)
        index = bisect.bisect_right(run.snapshot_seqs, target) - 1
        if index < 0:
            raise StoreError(
                f"run {run_id!r} has no snapshot at or below seq {target}",
                run_id=run_id,
                seq=target,
            )
        snapshot_seq = run.snapshot_seqs[index]
        return StoredRun(
            meta=meta,
            seq=target,
            snapshot_seq=snapshot_seq,
            snapshot=run.snapshots[snapshot_seq],
            records=tuple(run.records[snapshot_seq + 1 : target + 1]),
        )

    async def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(seq, record)`` for ``start <= seq < stop``; see :meth:`Store.history`."""
        run, _ = self._run(run_id)
        first = max(start, 0)
        end = run.head + 1 if stop is None else max(min(stop, run.head + 1), first)
        # One slice rather than an index per seq; ``end >= first >= 0`` keeps it from
        # ever counting from the end of the list.
        for item in enumerate(run.records[first:end], first):
            yield item

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first; see :meth:`Store.list_runs`."""
        check_page(limit, offset)
        self._check_open()
        metas = [
            listed(run.meta, run.head)
            for run in self._runs.values()
            if run.meta is not None and (status is None or run.meta.status == status)
        ]
        metas.sort(key=lambda meta: (-meta.updated_at, meta.run_id))
        return metas[offset : offset + limit]

    async def put_definition(self, key: str, body: bytes) -> None:
        """Keep a definition's bytes once; see :meth:`Store.put_definition`."""
        self._check_open()
        self._definitions.setdefault(key, bytes(body))

    async def get_definition(self, key: str) -> bytes | None:
        """The definition kept under ``key``; see :meth:`Store.get_definition`."""
        self._check_open()
        return self._definitions.get(key)

    async def has_definition(self, key: str) -> bool:
        """Whether a definition is kept under ``key``; see :meth:`Store.has_definition`."""
        self._check_open()
        return key in self._definitions

    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Put a message in the run's inbox once; see :meth:`Store.post_message`."""
        self._check_open()
        inbox = self._inboxes.setdefault(run_id, _Inbox())
        kept = inbox.ids.get(message_id)
        if kept is not None:
            return kept, False
        message = Message(
            run_id=run_id,
            position=len(inbox.messages) + 1,
            id=message_id,
            body=bytes(body),
            at=at,
        )
        inbox.messages.append(message)
        inbox.ids[message_id] = message
        return message, True

    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """The run's messages past ``after``; see :meth:`Store.messages`."""
        self._check_open()
        inbox = self._inboxes.get(run_id)
        if inbox is None:
            return []
        start = inbox.taken if after is None else max(after, 0)
        return inbox.messages[start : start + max(limit, 0)]

    async def take_messages(self, run_id: str, position: int) -> None:
        """Move the run's inbox cursor on; see :meth:`Store.take_messages`."""
        self._check_open()
        inbox = self._inboxes.setdefault(run_id, _Inbox())
        inbox.taken = max(inbox.taken, min(position, len(inbox.messages)))

    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Append live events; see :meth:`Store.append_stream`."""
        self._check_open()
        self._streams.setdefault(run_id, []).append(bytes(batch))

    async def read_stream(self, run_id: str) -> list[bytes]:
        """The live-event batches; see :meth:`Store.read_stream`."""
        self._check_open()
        return list(self._streams.get(run_id, ()))

    async def drop_stream(self, run_id: str) -> None:
        """Forget the live-event batches; see :meth:`Store.drop_stream`."""
        self._check_open()
        self._streams.pop(run_id, None)

    async def aclose(self) -> None:
        """Forget nothing (the data lives as long as the object); just refuse further use."""
        self._closed = True

    def _run(self, run_id: str) -> tuple[_Run, RunMeta]:
        """The run a read is about and its metadata, its head checked against its records.

        Raises:
            StoreError: The store is closed.
            RunNotFoundError: No such run.
            JournalHeadError: The metadata's seq is not that of the last record kept.
        """
        self._check_open()
        run = self._runs.get(run_id)
        meta = None if run is None else run.meta
        if run is None or meta is None:
            raise run_not_found_error(run_id)
        if meta.seq != run.head:
            raise journal_head_error(run_id, meta.seq, run.head)
        return run, meta

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed")


def _live_holder(run: _Run | None) -> str | None:
    if run is None or run.owner is None or run.expires_at <= time.time():
        return None
    return run.owner


@final
class _MemoryLine(LeaseLine):
    """The memory store's renewals, made from the keeper's thread under the lease lock."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        outcomes: list[Lease | LeaseLostError] = []
        for lease in leases:
            try:
                outcomes.append(self._store._renew(lease, lease.ttl))
            except LeaseLostError as exc:
                outcomes.append(exc)
        return outcomes
