"""The lease keeper: takes, renews, cuts off and gives back the leases of one engine's runs.

A run commits only while its lease's fencing token is the run's current one (see
:mod:`phasegraph.store.base`): a lease that expired is lost only when another holder
takes the run. So the keeper's job is to keep rivals out while this process is alive,
and to stop a run's actions when the run is, or may be, someone else's:

* **Renewal on a thread of its own.** One daemon thread per keeper renews every lease
  due within the next sixth of a lease in one batch, on the store's
  :class:`~phasegraph.store.LeaseLine` (a connection that is not the event loop's). A
  step that keeps the event loop busy for longer than a lease (a blocking call, a large
  value to encode, thousands of runs stepping at once) does not let the lease lapse.
  Renewals are due a third of a lease after the last one was sent.
* **The cut-off.** A run's actions are stopped (its driving task cancelled, on its own
  loop) when the store says another holder took the run, or when the store has taken no
  renewal for a whole lease, silent or refusing writes (a full store): a rival may take
  the run once its lease lapses. The error says which, and, when this process itself
  went a lease without renewing (it stalled), for how long.
* **Admission.** :attr:`LeaseKeeper.saturated` tells a server or worker that a renewal
  round takes longer than it may: it then takes no more runs in flight.

The keeper's clock (default :func:`time.monotonic`) is injected: tests move it and
:meth:`LeaseKeeper.poke` the thread instead of waiting out real leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Final, final

from phasegraph.errors import LeaseLostError, PhasegraphError
from phasegraph.run._options import RunOptions
from phasegraph.store._holder import owner_label
from phasegraph.store.base import Lease, LeaseLine, Store

__all__ = ["Hold", "LeaseKeeper"]

# Waits after a failed renewal, the last repeating until the lease's deadline.
_RETRY_DELAYS: Final = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
_IDLE_GRACE: Final = 2.0  # seconds the thread outlives its last hold (then ends)


@final
class Hold:
    """One run's lease while its keeper keeps it.

    ``lease`` is what commits are made with. Work under the lease is guarded: the task
    doing it is named with :meth:`enter`, and cancelled if the keeper cuts the lease off
    (then :meth:`cut_short` turns that cancellation into the :class:`LeaseLostError`).
    """

    __slots__ = (
        "_cutting",
        "_driving",
        "_failures",
        "_keeper",
        "_loop",
        "_reason",
        "_renew_at",
        "_renewed",
        "_taker",
        "lease",
    )

    def __init__(
        self, keeper: LeaseKeeper, lease: Lease, loop: asyncio.AbstractEventLoop, sent: float
    ) -> None:
        self._keeper = keeper
        self.lease = lease
        self._loop = loop
        # On the keeper's clock: when the last successful renewal (or the acquire) was
        # sent; the store counts the lease live for at most ``lease.ttl`` after it.
        self._renewed = sent
        self._renew_at = sent + lease.ttl / 3
        self._failures = 0
        self._reason: str | None = None  # set once the lease is gone: why, for the error
        self._taker: str | None = None  # who took the run over, when the store said
        self._driving: asyncio.Task[Any] | None = None
        self._cutting = False

    @property
    def run_id(self) -> str:
        """The run the lease is for."""
        return self.lease.run_id

    @property
    def lost(self) -> bool:
        """Whether the lease is gone (taken, released elsewhere, or cut off)."""
        return self._reason is not None

    def enter(self, task: asyncio.Task[Any] | None) -> None:
        """Name the task about to work under the lease (check :attr:`lost` first)."""
        self._driving = task

    def leave(self) -> None:
        """The guarded work ended."""
        self._driving = None

    def cut_short(self, task: asyncio.Task[Any] | None, step: int, committing: int | None) -> None:
        """On a cancellation of guarded work: raise if the keeper's cut-off alone did it.

        Raises:
            LeaseLostError: The keeper cut the work off (and nobody else cancelled it).
        """
        if self._cutting and task is not None:
            self._cutting = False
            if task.uncancel() == 0:  # the cut-off alone: else let the cancel go on
                raise self.error(step, committing) from None

    def taken(self, refusal: LeaseLostError) -> None:
        """The store refused a commit: another holder has the run (or it was released)."""
        self._keeper.taken(self, refusal)

    async def release(self) -> None:
        """Stop renewing and give the lease back (unless it is gone); never raises."""
        await self._keeper.release(self)

    def error(self, step: int | None, committing: int | None = None) -> LeaseLostError:
        """The error that stops the run, at its last committed ``step``."""
        run_id = self.run_id
        where = "stopped"
        if step is not None:
            where = f"stopped at step {step}, its last committed step"
            if committing is not None:
                where = f"stopped at step {step} or {committing} (it was committing that step)"
        reason = self._reason or "its lease is gone"
        return LeaseLostError(
            f"run {run_id!r} {where}: {reason}", holder=self._taker, run_id=run_id, seq=step
        )

    def _cut_off(self) -> None:
        """On the run's loop: end the work under the lease now (see :meth:`cut_short`)."""
        if self._driving is not None and not self._cutting:
            self._cutting = True
            self._driving.cancel()


@final
class LeaseKeeper:
    """Takes, renews and gives back the leases of one engine's runs (see the module doc).

    Args:
        store: Where the leases are.
        options: The lease length (``lease_ttl``) and owner name.
        clock: Seconds on a monotonic clock (tests pass one they move).
    """

    def __init__(
        self, store: Store, options: RunOptions, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._ttl = options.lease_ttl
        self._owner = options.owner_name()
        self._clock = clock
        self._cond = threading.Condition()
        self._holds: dict[Hold, None] = {}  # in the order they were taken
        self._line: LeaseLine | None = None
        self._thread: threading.Thread | None = None
        self._round = 0.0  # seconds the last renewal round took
        self._rounds = 0

    @property
    def saturated(self) -> bool:
        """Whether renewing every lease takes too long to take on more runs.

        A round may take a sixth of a lease: the renewals of the runs already in flight
        must stay well inside the two thirds of a lease they have before it lapses.
        """
        return self._round > self._ttl / 6

    async def room(self) -> None:
        """Wait until the keeper can keep one more lease renewed (see :attr:`saturated`).

        A server or worker asks before it takes a run in flight, so that renewals keep
        up with the runs it holds instead of every lease lapsing together.
        """
        # Polled: the round time changes on the keeper's thread, not on this loop.
        while self.saturated and self._holds:  # noqa: ASYNC110
            await asyncio.sleep(self._ttl / 12)

    async def acquire(self, run_id: str) -> Hold:
        """Take the run's lease and keep it renewed until :meth:`release`.

        Raises:
            LeaseHeldError: Another live process holds the run.
            StoreError: The store refused or could not be reached.
        """
        loop = asyncio.get_running_loop()
        sent = self._clock()
        lease = await self._store.acquire(run_id, self._owner, self._ttl)
        hold = Hold(self, lease, loop, sent)
        with self._cond:
            if self._line is None:  # the first lease, or the thread ended and closed it
                self._line = self._store.lease_line()
            self._holds[hold] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve,
                    args=(self._line,),
                    name="phasegraph-leases",
                    daemon=True,  # a process may end with runs held: the store fences them
                )
                self._thread.start()
            self._cond.notify()
        return hold

    async def release(self, hold: Hold) -> None:
        """Stop renewing and give the lease back (unless it is gone); never raises."""
        self.forget(hold)
        if hold.lost:
            return  # taken or cut off: nothing to give back (and the store may be away)
        hold._reason = "its lease was released"
        with contextlib.suppress(PhasegraphError):
            await asyncio.shield(self._store.release(hold.lease))

    def forget(self, hold: Hold) -> None:
        """Stop renewing ``hold`` (the thread may be renewing it right now: harmless)."""
        with self._cond:
            self._holds.pop(hold, None)
            self._cond.notify()

    def poke(self) -> None:
        """Have the renewal thread look at the clock now (after a test moved it)."""
        with self._cond:
            self._cond.notify()

    def wait_rounds(self, count: int, timeout: float) -> bool:
        """Block until ``count`` renewal rounds have ended in all; whether they had by then."""
        with self._cond:
            return self._cond.wait_for(lambda: self._rounds >= count, timeout)

    @property
    def rounds(self) -> int:
        """Renewal rounds ended so far (each renews, or fails to renew, a batch of leases)."""
        return self._rounds

    def taken(self, hold: Hold, refusal: LeaseLostError) -> None:
        """The store said ``hold``'s lease is no longer ours: stop renewing it, say why.

        The run's own commit found out (it raises the error itself); see :meth:`_cut`
        for a renewal that does.
        """
        with self._cond:
            if not hold.lost:
                self._lose(hold, self._taken_reason(hold, refusal), refusal.holder)
                self._cond.notify()

    def _taken_reason(self, hold: Hold, refusal: LeaseLostError) -> str:
        """Why a lease the store says is no longer ours is gone, for the run's error."""
        run_id = hold.run_id
        silent = self._clock() - hold._renewed
        if refusal.holder:
            whom = f"{owner_label(refusal.holder)!r} took the run over"
            then = "it goes on there"
        else:
            whom = "its lease was released, or taken by another process and let lapse"
            then = (
                f"see 'phasegraph status {run_id}', and continue it with "
                f"'phasegraph resume {run_id}' if nothing drives it"
            )
        if silent > hold.lease.ttl:
            stalled = (
                f"this process went {silent:.1f} s without renewing its lease of "
                f"{hold.lease.ttl:g} s (it stalled), and {whom}"
            )
            return f"{stalled}, so its actions here were stopped; {then}"
        return f"{whom}, so its actions here were stopped; {then}"

    # -- the renewal thread ------------------------------------------------------------

    def _serve(self, line: LeaseLine) -> None:
        """Renew due leases in batches until no lease has been held for a while."""
        try:
            while (due := self._next_batch()) is not None:
                self._renew(line, due)
        finally:
            line.close()

    def _next_batch(self) -> list[Hold] | None:
        """Wait until leases are due and return them; ``None`` once idle (the thread ends)."""
        with self._cond:
            idle_since: float | None = None
            while True:
                now = self._clock()
                if not self._holds:
                    # Real time, not the keeper's clock: a test's frozen clock must not
                    # keep the thread alive.
                    idle = time.monotonic()
                    idle_since = idle if idle_since is None else idle_since
                    if idle - idle_since >= _IDLE_GRACE:
                        self._thread = None
                        self._line = None  # closed by the ending thread
                        return None
                    self._cond.wait(_IDLE_GRACE)
                    continue
                idle_since = None
                # Everything due within a sixth of a lease goes now, in one batch.
                soon = now + self._ttl / 6
                due = [hold for hold in self._holds if hold._renew_at <= soon]
                if due:
                    return due
                self._cond.wait(min(hold._renew_at for hold in self._holds) - soon)

    def _renew(self, line: LeaseLine, due: list[Hold]) -> None:
        sent = self._clock()
        try:
            outcomes: list[Lease | LeaseLostError] | None = line.renew([h.lease for h in due])
            failure: BaseException | None = None
        except Exception as exc:  # unreachable, locked, loading...: retried until the deadline
            outcomes, failure = None, exc
        with self._cond:
            now = self._clock()
            for index, hold in enumerate(due):
                if hold not in self._holds:
                    continue  # released meanwhile
                if outcomes is None:
                    self._failed(hold, failure, now)
                    continue
                outcome = outcomes[index]
                if isinstance(outcome, Lease):
                    hold.lease = outcome
                    hold._renewed, hold._failures = sent, 0
                    hold._renew_at = sent + outcome.ttl / 3
                else:
                    self._cut(hold, self._taken_reason(hold, outcome), outcome.holder)
            self._round = now - sent
            self._rounds += 1
            self._cond.notify_all()

    def _failed(self, hold: Hold, failure: BaseException | None, now: float) -> None:
        """A renewal the store did not make (silent, or refusing writes): retry, or cut off."""
        deadline = hold._renewed + hold.lease.ttl
        if now < deadline:
            delay = _RETRY_DELAYS[min(hold._failures, len(_RETRY_DELAYS) - 1)]
            hold._failures += 1
            hold._renew_at = min(now + delay, deadline)
            return
        run_id = hold.run_id
        self._cut(
            hold,
            f"the store took no renewal of its lease for {hold.lease.ttl:g} s ({failure}), so "
            "its lease may lapse and its actions were stopped; continue it with "
            f"'phasegraph resume {run_id}'",
        )

    def _lose(self, hold: Hold, reason: str, taker: str | None = None) -> None:
        """(Under the lock.) The lease is gone: say why, and stop renewing it."""
        hold._reason, hold._taker = reason, taker
        self._holds.pop(hold, None)

    def _cut(self, hold: Hold, reason: str, taker: str | None = None) -> None:
        """(Under the lock.) The lease is gone: as :meth:`_lose`, and stop the run's work."""
        self._lose(hold, reason, taker)
        with contextlib.suppress(RuntimeError):  # the run's loop is closed: nothing runs
            hold._loop.call_soon_threadsafe(hold._cut_off)
