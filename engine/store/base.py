"""The store contract: one small async ABC, bytes in and bytes out.

A store keeps, per run:

* a **journal** of encoded step records, one per ``seq`` starting at 0;
* **snapshots**: full encoded run states at some of those seqs (always at seq 0) —
  the interpreter decides how often, so the bytes written per step grow with what the
  step changed, not with the size of the run;
* **metadata** (graph, status, head seq, times) indexed for listing;
* a **lease** with a fencing token: the single writer allowed to commit.

Beside the runs, a store keeps **definitions**: the bytes of a run's whole definition,
each under its content digest, once however many runs share it. No run owns one: a run's
retention or deletion never removes a definition.

Leases fence by token, not by time: a lease that expired is lost only once another
holder takes the run (which issues a new token) or it is released. Until then its
holder's renewals and commits are accepted and extend it again; expiry only lets a
rival take over.

Guarantees every backend gives (the contract suite in ``phasegraph.testing`` checks them):

* ``commit`` is atomic: the record, the snapshot (if any), the new head and the metadata
  are all written or none is.
* ``commit`` succeeds only while the lease's token is the run's current one (else
  :class:`LeaseLostError`) and only when ``seq`` is exactly the head plus one, or 0 for
  a new run (else :class:`SequenceConflictError`). A commit under a current token whose
  lease expired takes it again for ``lease.ttl``, in the same atomic write. Nothing
  committed is ever overwritten.
* ``read`` returns the nearest snapshot at or below the asked seq plus every record after
  it up to that seq, in order, so the caller can rebuild the exact state at that seq.
* ``read`` and ``history`` check the head: a run whose last stored record is not at the
  head seq of its metadata (the last record is missing, or records lie past the head) is
  refused with :class:`JournalHeadError`, whatever seq is asked for. A store changed
  outside phasegraph is never shown one step short, nor continued from an earlier step.

Beside its journal, each run has an **inbox**: the messages sent to it, in the order the
store took them in, each under an id given by its sender. A message posted again under an
id already kept is not taken again (the first one is answered). The run takes them in
order: a cursor per run says how many it has taken (see :meth:`Store.take_messages`).

Backends never decode payloads: they see bytes and the metadata in :class:`Commit`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Self

from phasegraph.errors import LeaseLostError, StoreUnavailableError
from phasegraph.model import Value

__all__ = [
    "Commit",
    "ForwardingStore",
    "Lease",
    "LeaseLine",
    "Message",
    "RunMeta",
    "Store",
    "StoredRun",
]


class Lease(Value, frozen=True, kw_only=True):
    """The right to commit to one run, until ``expires_at``.

    Attributes:
        run_id: The run the lease is for.
        owner: Who holds it (free text shown to a refused second writer).
        token: Fencing token; strictly increases each time the lease changes hands.
        expires_at: Expiry, in seconds since the epoch by the store's clock.
        ttl: Seconds a renewal, or a commit that finds the lease expired, extends it by.
    """

    run_id: str
    owner: str
    token: int
    expires_at: float
    ttl: float = 30.0


class RunMeta(Value, frozen=True, kw_only=True):
    """Indexed facts about a run, updated with every commit.

    Attributes:
        run_id: The run id.
        graph: The graph name.
        status: The run status after the commit (a ``RunStatus`` value).
        seq: The head seq after the commit.
        created_at: Creation time, seconds since the epoch.
        updated_at: Time of the last commit, seconds since the epoch.
        unreadable: Set in a listing when this run cannot be read (damaged, or changed
            outside phasegraph): says why. When its stored metadata is what cannot be
            read, the other fields are placeholders (empty graph and status, seq -1, times
            0); when its journal does not end at its head, they are as stored.
    """

    run_id: str
    graph: str
    status: str
    seq: int
    created_at: float
    updated_at: float
    unreadable: str | None = None

    @classmethod
    def unreadable_run(cls, run_id: str, why: str) -> RunMeta:
        """The listing entry of a run whose metadata cannot be read."""
        return cls(
            run_id=run_id,
            graph="",
            status="",
            seq=-1,
            created_at=0.0,
            updated_at=0.0,
            unreadable=why,
        )


class Commit(Value, frozen=True, kw_only=True):
    """Everything one step writes.

    Attributes:
        seq: The step number; must be the head plus one (0 creates the run).
        record: The encoded step record for ``seq``.
        snapshot: The encoded full run state at ``seq``, or ``None`` for a delta-only
            step. Required at seq 0.
        meta: The run's metadata after this step.
    """

    seq: int
    record: bytes
    snapshot: bytes | None
    meta: RunMeta


class StoredRun(Value, frozen=True, kw_only=True):
    """What a read returns: enough bytes to rebuild the run state at ``seq``.

    Attributes:
        meta: The run's metadata at its head.
        seq: The seq that was read (the head unless another was asked for).
        snapshot_seq: The seq of ``snapshot`` (at most ``seq``).
        snapshot: The nearest full snapshot at or below ``seq``.
        records: The records ``snapshot_seq + 1 .. seq``, in order.
    """

    meta: RunMeta
    seq: int
    snapshot_seq: int
    snapshot: bytes
    records: tuple[bytes, ...]


class Message(Value, frozen=True, kw_only=True):
    """One message of a run's inbox, as the store keeps it.

    Attributes:
        run_id: The run it was sent to.
        position: Its place in the run's inbox: 1 for the first message taken in, then
            2, 3, ... in the order the store took them in.
        id: The id its sender gave it (unique in the run's inbox).
        body: The encoded message (the store never reads it).
        at: When it was posted, seconds since the epoch (the poster's clock).
    """

    run_id: str
    position: int
    id: str
    body: bytes
    at: float


class Store(abc.ABC):
    """Async persistence for runs. Use as ``async with store:``; ``aclose`` is idempotent.

    A backend implements the lease (:meth:`acquire`, :meth:`renew`, :meth:`holder`,
    :meth:`release`), the journal (:meth:`commit`, :meth:`read`, :meth:`history`,
    :meth:`list_runs`), the run definitions (:meth:`put_definition`,
    :meth:`get_definition`, :meth:`has_definition`), the inbox (:meth:`post_message`,
    :meth:`messages`, :meth:`take_messages`), the durable live stream
    (:meth:`append_stream`, :meth:`read_stream`, :meth:`drop_stream`) and :meth:`aclose`;
    :class:`~phasegraph.testing.StoreContract` checks them all.
    """

    @abc.abstractmethod
    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease for ``ttl`` seconds (the run need not exist yet).

        A lease whose holder let it expire is taken over, and the token increases so the
        old holder can no longer commit. So is a live lease whose ``owner`` names a holder
        process that provably died on this machine (see
        :func:`~phasegraph.store.holder_gone`), atomically: only while that holder is still
        the one recorded.

        Raises:
            LeaseHeldError: Another holder's lease has not expired.
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold (one that expired too, while nobody took the run).

        Raises:
            LeaseLostError: Another holder took the run, or the lease was released.
        """

    @abc.abstractmethod
    async def holder(self, run_id: str) -> str | None:
        """The owner of the run's live lease, or ``None`` if nobody holds it now.

        Only reads: asking changes no lease.
        """

    def lease_line(self) -> LeaseLine:
        """How the lease keeper renews this store's leases from a thread of its own.

        Called on the event loop that uses the store. The default hands each renewal
        back to that loop, so a loop that is busy or blocked delays it; the shipped
        stores renew on a line that needs no event loop.
        """
        return _LoopLine(self, asyncio.get_running_loop())

    @abc.abstractmethod
    async def release(self, lease: Lease) -> None:
        """Give the lease up; does nothing if it is no longer ours."""

    @abc.abstractmethod
    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step atomically.

        Raises:
            LeaseLostError: ``lease`` is not the run's current lease.
            SequenceConflictError: ``commit.seq`` is not the head plus one.
            StoreUnavailableError: The store cannot be reached (nothing was written).
        """

    @abc.abstractmethod
    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read what is needed to rebuild the run at ``seq`` (default: the head).

        Raises:
            RunNotFoundError: No such run, or no such seq in it.
            JournalHeadError: The run's last stored record is not at its head seq.
        """

    @abc.abstractmethod
    def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(seq, record)`` for ``start <= seq < stop`` in order.

        Raises:
            RunNotFoundError: No such run (raised on first iteration).
            JournalHeadError: The run's last stored record is not at its head seq
                (raised on first iteration, before any record).
        """

    async def history_list(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Every ``(seq, record)`` :meth:`history` yields, in one list.

        The read of a whole history (``Engine.history``): a store that can fetch it at
        once overrides this (SQLite: one query); the default collects :meth:`history`.

        Raises:
            RunNotFoundError: As :meth:`history`.
            JournalHeadError: As :meth:`history`.
        """
        return [item async for item in self.history(run_id, start=start, stop=stop)]

    @abc.abstractmethod
    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first, optionally only those in ``status``."""

    @abc.abstractmethod
    async def put_definition(self, key: str, body: bytes) -> None:
        """Keep a run definition's bytes under ``key`` (its content digest), once.

        Idempotent: keeping a key already kept writes nothing more (bodies under one key
        are equal by construction: the key is their digest). Not tied to any run or lease,
        and never removed by a run's retention or deletion: several runs share one.

        Raises:
            StoreUnavailableError: The store cannot be reached, as for every write (a
                full store is an outage, as for commits).
        """

    @abc.abstractmethod
    async def get_definition(self, key: str) -> bytes | None:
        """The bytes kept under ``key``, or ``None`` if none are.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def has_definition(self, key: str) -> bool:
        """Whether bytes are kept under ``key`` (cheaper than reading them: one small read).

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Put a message at the end of the run's inbox, unless its id is kept there already.

        Atomic: of two posts of one id, one is taken in and the other answered with it.
        The run need not exist (the engine checks that first); no lease is needed.

        Returns:
            The message as kept (the one kept first, for an id kept already), and whether
            this post took it in.

        Raises:
            StoreUnavailableError: The store cannot be reached (nothing was kept).
        """

    @abc.abstractmethod
    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """Messages of the run's inbox past ``after`` (default: those not taken), in order.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def take_messages(self, run_id: str, position: int) -> None:
        """Mark the run's messages up to ``position`` taken (a cursor that only moves on).

        Taking a position at or below the cursor changes nothing.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Append a batch of a run's live events (a durable stream's turn in flight).

        Kept beside the journal, never in it: batches are dropped once the turns they
        stream are committed. Not fenced by the lease: a reader orders what it reads by
        the ids inside the batches.

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def read_stream(self, run_id: str) -> list[bytes]:
        """The run's live-event batches, in the order they were appended (none: empty).

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def drop_stream(self, run_id: str) -> None:
        """Forget the run's live-event batches (idempotent).

        Raises:
            StoreUnavailableError: The store cannot be reached.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections. Safe to call more than once."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ForwardingStore(Store):
    """A store that hands every call to ``inner``: subclass it to observe or alter one call.

    Benchmarks count the bytes of each commit with it, and the property kit loses a chosen
    commit to inject a crash, each overriding :meth:`commit` alone.

    Args:
        inner: The store that does the work.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Forwarded to ``inner``."""
        return await self.inner.acquire(run_id, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Forwarded to ``inner``."""
        return await self.inner.renew(lease, ttl)

    async def release(self, lease: Lease) -> None:
        """Forwarded to ``inner``."""
        await self.inner.release(lease)

    async def holder(self, run_id: str) -> str | None:
        """Forwarded to ``inner``."""
        return await self.inner.holder(run_id)

    def lease_line(self) -> LeaseLine:
        """Forwarded to ``inner``."""
        return self.inner.lease_line()

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Forwarded to ``inner``."""
        await self.inner.commit(lease, commit)

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Forwarded to ``inner``."""
        return await self.inner.read(run_id, seq)

    def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Forwarded to ``inner``."""
        return self.inner.history(run_id, start=start, stop=stop)

    async def history_list(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Forwarded to ``inner``."""
        return await self.inner.history_list(run_id, start=start, stop=stop)

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """Forwarded to ``inner``."""
        return await self.inner.list_runs(status=status, limit=limit, offset=offset)

    async def put_definition(self, key: str, body: bytes) -> None:
        """Forwarded to ``inner``."""
        await self.inner.put_definition(key, body)

    async def get_definition(self, key: str) -> bytes | None:
        """Forwarded to ``inner``."""
        return await self.inner.get_definition(key)

    async def has_definition(self, key: str) -> bool:
        """Forwarded to ``inner``."""
        return await self.inner.has_definition(key)

    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Forwarded to ``inner``."""
        return await self.inner.post_message(run_id, message_id, body, at)

    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """Forwarded to ``inner``."""
        return await self.inner.messages(run_id, after=after, limit=limit)

    async def take_messages(self, run_id: str, position: int) -> None:
        """Forwarded to ``inner``."""
        await self.inner.take_messages(run_id, position)

    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Forwarded to ``inner``."""
        await self.inner.append_stream(run_id, batch)

    async def read_stream(self, run_id: str) -> list[bytes]:
        """Forwarded to ``inner``."""
        return await self.inner.read_stream(run_id)

    async def drop_stream(self, run_id: str) -> None:
        """Forwarded to ``inner``."""
        await self.inner.drop_stream(run_id)

    async def aclose(self) -> None:
        """Forwarded to ``inner``."""
        await self.inner.aclose()


class LeaseLine(abc.ABC):
    """Renews leases from one thread other than the event loop's (the lease keeper's).

    A run's lease must outlive a step that keeps its event loop busy (a long synchronous
    call, a huge value to encode): renewals made on a line of their own, on a connection
    of their own, are not queued behind the loop or behind commits.
    """

    @abc.abstractmethod
    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        """Extend each lease by its ``ttl``; blocks the calling thread.

        Returns:
            Per lease, in order: the renewed lease, or why it is lost (another holder
            took the run, or it was released).

        Raises:
            StoreUnavailableError: The store did not answer; none may be renewed.
        """

    def close(self) -> None:  # noqa: B027 - a line without connections has nothing to close
        """Close what the line opened (called from the thread that renewed)."""


class _LoopLine(LeaseLine):
    """Renewals handed to the store's event loop: for a store without a line of its own."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        future = asyncio.run_coroutine_threadsafe(self._renew(leases), self._loop)
        try:
            return future.result(timeout=min(lease.ttl for lease in leases))
        except TimeoutError as exc:
            future.cancel()
            raise StoreUnavailableError("the event loop did not renew the leases") from exc
        except RuntimeError as exc:  # the loop is closed
            raise StoreUnavailableError(f"cannot renew leases: {exc}") from exc

    async def _renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        outcomes: list[Lease | LeaseLostError] = []
        for lease in leases:
            try:
                outcomes.append(await self._store.renew(lease, lease.ttl))
            except LeaseLostError as exc:
                outcomes.append(exc)
        return outcomes
