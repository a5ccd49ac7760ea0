"""Test kit: the store contract suite, and a Redis server for tests.

Check a store by subclassing :class:`StoreContract` in a pytest module and giving it an
async ``store`` fixture that yields a fresh, empty store::

    class TestMyStore(StoreContract):
        @pytest.fixture
        async def store(self) -> AsyncIterator[Store]:
            async with MyStore() as store:
                yield store

A ``journal_damage`` fixture gives the damaged-journal cases a :class:`JournalDamage`:
the means to change that store's copy of a run behind its back (as a hand edit or a disk
fault would), so the suite can check that every read refuses such a run.

Payloads are plain bytes: the suite needs no codec. It needs ``pytest-asyncio`` in
auto mode. :func:`redis_server` gives a URL of a real Redis for tests that need one
(:func:`~phasegraph.testing.redis_cluster` one of a Redis Cluster), and
:func:`isolated_redis_store` a store under a prefix no other test uses, on either.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasegraph._process import ProcessId, process_start, this_process
from phasegraph.errors import (
    InputError,
    JournalHeadError,
    LeaseHeldError,
    LeaseLostError,
    RunNotFoundError,
    SequenceConflictError,
    StoreUnavailableError,
)
from phasegraph.model import replace
from phasegraph.store import Commit, Lease, RunMeta, Store, open_store
from phasegraph.store._holder import HOLDER_SEPARATOR
from phasegraph.store.redis import RedisStore

__all__ = [
    "REDIS_URL_ENV",
    "JournalDamage",
    "StoreContract",
    "isolated_redis_store",
    "isolated_redis_url",
    "make_commit",
    "redis_server",
]

REDIS_URL_ENV = "PHASEGRAPH_TEST_REDIS_URL"
"""Environment variable naming a Redis the tests may use instead of starting one."""

_SHORT = 0.05  # a lease ttl the suite lets expire
_STEPS = st.lists(st.tuples(st.booleans(), st.binary(max_size=40)), min_size=1, max_size=12)
# One test body runs under each subclass (each store), so differing executors are
# expected; every example uses a fresh run id in the function-scoped store. A store on a
# busy machine may be slow to answer: that is not a failure of the store.
_PER_STORE = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.differing_executors,
        HealthCheck.too_slow,
    ],
)
_T0 = 1_700_000_000.0


def _dead_holder() -> ProcessId:
    """The id of a process of this machine that has ended (a child, started and killed)."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start(child.pid)
        assert start is not None
    finally:
        child.kill()
        child.wait()
    return dataclasses.replace(this_process(), pid=child.pid, start=start)


def make_commit(
    run_id: str,
    seq: int,
    *,
    record: bytes | None = None,
    snapshot: bytes | None = None,
    status: str = "running",
    updated_at: float | None = None,
) -> Commit:
    """A commit of plain bytes for tests; seq 0 gets a snapshot unless one is given."""
    if snapshot is None and seq == 0:
        snapshot = b"snapshot-0"
    record = b"record-%d" % seq if record is None else record
    updated = _T0 + seq if updated_at is None else updated_at
    meta = RunMeta(
        run_id=run_id, graph="g", status=status, seq=seq, created_at=_T0, updated_at=updated
    )
    return Commit(seq=seq, record=record, snapshot=snapshot, meta=meta)


class JournalDamage(Protocol):
    """Changes one store's copy of a run outside the store, as a hand edit or a bad disk would.

    The contract's damaged-journal cases get one from the ``journal_damage`` fixture.
    """

    async def drop_last_record(self, run_id: str) -> None:
        """Delete the run's last step record; its metadata (and head seq) stays as it is."""
        ...

    async def set_head(self, run_id: str, seq: int) -> None:
        """Write ``seq`` as the head in the run's metadata; its records stay as they are."""
        ...


async def _refused(store: Store, run_id: str, head: int, last: int) -> None:
    """Every read of ``run_id`` (at its head, at each seq it ever had, its history) is refused.

    Each raises :class:`JournalHeadError` naming the run, the head and the last record
    stored; a history read yields no record first. A listing shows the run marked
    unreadable with the same reason, its stored metadata kept, and no other run marked.
    """
    listed = await store.list_runs()
    (damaged,) = [meta for meta in listed if meta.unreadable is not None]
    assert (damaged.run_id, damaged.seq) == (run_id, head)
    why = damaged.unreadable or ""
    assert why.startswith(f"its head is seq {head} but its journal "), why
    assert f"seq {max(head, last)}" in why
    named = f"run {run_id!r}: its head is seq {head}"
    for at in (None, *range(max(head, last) + 1)):
        with pytest.raises(JournalHeadError, match=named) as caught:
            await store.read(run_id, at)
        assert (caught.value.run_id, caught.value.seq) == (run_id, head)
        assert caught.value.last_stored == last
    for start, stop in ((0, None), (1, 2), (head, None), (last + 1, None)):
        yielded: list[int] = []
        with pytest.raises(JournalHeadError, match=named) as caught:
            await _drain(store.history(run_id, start=start, stop=stop), yielded)
        assert yielded == []
        assert (caught.value.seq, caught.value.last_stored) == (head, last)
        with pytest.raises(JournalHeadError, match=named) as caught:
            await store.history_list(run_id, start=start, stop=stop)
        assert (caught.value.seq, caught.value.last_stored) == (head, last)


async def _drain(history: AsyncIterator[tuple[int, bytes]], seqs: list[int]) -> None:
    """Append each seq ``history`` yields to ``seqs``, to its end."""
    async for seq, _ in history:
        seqs.append(seq)


def _digest(body: bytes) -> str:
    """A definition's key: the sha256 hex digest of its bytes."""
    return hashlib.sha256(body).hexdigest()


async def _fill(store: Store, lease: Lease, count: int, snapshot_every: int = 0) -> None:
    for seq in range(count):
        snap = b"snap-%d" % seq if seq % (snapshot_every or count) == 0 else None
        await store.commit(lease, make_commit(lease.run_id, seq, snapshot=snap))


class StoreContract:
    """The store contract as pytest tests; subclass it and provide a ``store`` fixture."""

    @pytest.fixture
    async def store(self) -> Store:
        """Override: yield a fresh, empty store (function scope)."""
        pytest.fail(f"{type(self).__name__} must define an async 'store' fixture")

    @pytest.fixture
    async def journal_damage(self, store: Store) -> JournalDamage:
        """Override: yield a :class:`JournalDamage` working on ``store``'s own data."""
        pytest.fail(f"{type(self).__name__} must define a 'journal_damage' fixture")

    async def test_commit_then_read_head(self, store: Store) -> None:
        """A read returns the head meta, the snapshot and the records after it."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 3)
        got = await store.read("r")
        assert (got.seq, got.snapshot_seq, got.snapshot) == (2, 0, b"snap-0")
        assert got.records == (b"record-1", b"record-2")
        assert got.meta == make_commit("r", 2).meta

    async def test_read_uses_nearest_snapshot(self, store: Store) -> None:
        """A read at any seq starts at the nearest snapshot at or below it."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 8, snapshot_every=3)
        for seq in range(8):
            got = await store.read("r", seq)
            base = seq - seq % 3
            assert (got.seq, got.snapshot_seq, got.snapshot) == (seq, base, b"snap-%d" % base)
            assert got.records == tuple(b"record-%d" % s for s in range(base + 1, seq + 1))
            assert got.meta.seq == 7

    @_PER_STORE
    @given(steps=_STEPS, at=st.integers(0, 20))
    async def test_read_property(
        self, store: Store, steps: list[tuple[bool, bytes]], at: int
    ) -> None:
        """Whatever the snapshot pattern and bytes, a read rebuilds exactly what was written."""
        run_id = uuid.uuid4().hex
        lease = await store.acquire(run_id, "w1", 30)
        for seq, (flag, record) in enumerate(steps):
            snap = b"s%d" % seq if flag or seq == 0 else None
            await store.commit(lease, make_commit(run_id, seq, record=record, snapshot=snap))
        seq = at % len(steps)
        base = max(s for s in range(seq + 1) if steps[s][0] or s == 0)
        got = await store.read(run_id, seq)
        assert (got.snapshot_seq, got.snapshot) == (base, b"s%d" % base)
        assert got.records == tuple(record for _, record in steps[base + 1 : seq + 1])

    async def test_unknown_run_is_not_found(self, store: Store) -> None:
        """Reading or listing the history of an unknown run raises RunNotFoundError."""
        await store.acquire("leased-only", "w1", 30)
        for run_id in ("nope", "leased-only"):
            with pytest.raises(RunNotFoundError, match=run_id):
                await store.read(run_id)
            with pytest.raises(RunNotFoundError, match=run_id):
                [item async for item in store.history(run_id)]
            with pytest.raises(RunNotFoundError, match=run_id):
                await store.history_list(run_id)

    async def test_read_beyond_head_names_head(self, store: Store) -> None:
        """A read past the head (or below 0) names the run and the head."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 3)
        with pytest.raises(RunNotFoundError, match=r"'r'.*head is 2"):
            await store.read("r", 3)
        with pytest.raises(RunNotFoundError, match="'r'"):
            await store.read("r", -1)

    async def test_seq_must_follow_head(self, store: Store) -> None:
        """A commit must be at head + 1 (0 for a new run); a refused one writes nothing."""
        lease = await store.acquire("r", "w1", 30)
        with pytest.raises(SequenceConflictError, match="head is -1"):
            await store.commit(lease, make_commit("r", 1, snapshot=b"s"))
        await _fill(store, lease, 2)
        with pytest.raises(SequenceConflictError, match="head is 1"):
            await store.commit(lease, make_commit("r", 3))
        with pytest.raises(SequenceConflictError, match="seq 0"):
            await store.commit(lease, make_commit("r", 0, record=b"other"))
        assert [s async for s, _ in store.history("r")] == [0, 1]
        assert (await store.read("r")).meta.seq == 1

    async def test_same_commit_again_is_a_no_op(self, store: Store) -> None:
        """Re-sending an identical commit succeeds and changes nothing; other bytes conflict."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 3)
        await store.commit(lease, make_commit("r", 2))
        await store.commit(lease, make_commit("r", 1))
        with pytest.raises(SequenceConflictError, match="seq 2"):
            await store.commit(lease, make_commit("r", 2, record=b"different"))
        assert [r async for _, r in store.history("r")] == [b"record-%d" % s for s in range(3)]
        assert (await store.read("r")).meta.seq == 2

    async def test_malformed_commit_is_input_error(self, store: Store) -> None:
        """Seq 0 without a snapshot, or meta of another run or seq, is refused before I/O."""
        lease = await store.acquire("r", "w1", 30)
        bad = (
            Commit(seq=0, record=b"x", snapshot=None, meta=make_commit("r", 0).meta),
            Commit(seq=0, record=b"x", snapshot=b"s", meta=make_commit("other", 0).meta),
            Commit(seq=0, record=b"x", snapshot=b"s", meta=make_commit("r", 1).meta),
        )
        for commit in bad:
            with pytest.raises(InputError):
                await store.commit(lease, commit)
        with pytest.raises(RunNotFoundError):
            await store.read("r")

    async def test_held_lease_is_refused_naming_holder(self, store: Store) -> None:
        """Acquiring a live lease raises LeaseHeldError naming the run and the holder."""
        await store.acquire("r", "worker-one", 30)
        with pytest.raises(LeaseHeldError, match=r"'r'.*'worker-one'"):
            await store.acquire("r", "worker-two", 30)
        with pytest.raises(LeaseHeldError):
            await store.acquire("r", "worker-one", 30)

    async def test_concurrent_acquire_has_one_winner(self, store: Store) -> None:
        """Of many concurrent acquires of one run, exactly one gets the lease."""
        results = await asyncio.gather(
            *(store.acquire("r", f"w{i}", 30) for i in range(5)), return_exceptions=True
        )
        assert sum(isinstance(r, Lease) for r in results) == 1
        assert sum(isinstance(r, LeaseHeldError) for r in results) == 4

    async def test_takeover_fences_the_old_writer(self, store: Store) -> None:
        """After expiry another owner takes over with a larger token; the old one is fenced."""
        old = await store.acquire("r", "w1", 30)
        await _fill(store, old, 2)
        old = await store.renew(old, _SHORT)
        await asyncio.sleep(_SHORT * 2)
        new = await store.acquire("r", "w2", 30)
        assert new.token > old.token
        with pytest.raises(LeaseLostError, match=r"'r'.*'w2'"):
            await store.commit(old, make_commit("r", 2))
        with pytest.raises(LeaseLostError):
            await store.renew(old, 30)
        await store.release(old)  # not ours any more: must not free w2's lease
        with pytest.raises(LeaseHeldError, match="'w2'"):
            await store.acquire("r", "w3", 30)
        assert (await store.read("r")).meta.seq == 1
        await store.commit(new, make_commit("r", 2))
        assert (await store.read("r")).meta.seq == 2

    async def test_dead_holder_on_this_machine_is_taken_over_at_once(self, store: Store) -> None:
        """A live lease whose holder process died here is taken over, fencing it; once."""
        dead = _dead_holder()
        old = await store.acquire("r", f"crashed{HOLDER_SEPARATOR}{dead.encode()}", 30)
        await _fill(store, old, 1)
        results = await asyncio.gather(
            *(store.acquire("r", f"w{i}", 30) for i in range(4)), return_exceptions=True
        )
        (new,) = [r for r in results if isinstance(r, Lease)]
        assert sum(isinstance(r, LeaseHeldError) for r in results) == 3
        assert new.token > old.token
        with pytest.raises(LeaseLostError):
            await store.commit(old, make_commit("r", 1))
        with pytest.raises(LeaseLostError):
            await store.renew(old, 30)
        await store.commit(new, make_commit("r", 1))
        assert (await store.read("r")).meta.seq == 1

    async def test_holder_elsewhere_or_alive_keeps_its_lease(self, store: Store) -> None:
        """The fencing rule holds for a holder on another host or boot, or a live one."""
        dead = _dead_holder()
        holders = {
            "other-host": dataclasses.replace(dead, host=dead.host + "-elsewhere"),
            "other-boot": dataclasses.replace(dead, boot="another-boot"),
            "alive": this_process(),
        }
        for name, holder in holders.items():
            await store.acquire(name, f"{name}{HOLDER_SEPARATOR}{holder.encode()}", 30)
            with pytest.raises(LeaseHeldError, match=f"being written by '{name}'"):
                await store.acquire(name, "w2", 30)

    async def test_expired_lease_nobody_took_still_commits_and_is_taken_again(
        self, store: Store
    ) -> None:
        """The token fences, not the clock: a lapsed lease nobody took still commits.

        The commit takes it again for the lease's ttl, so a rival is refused once more.
        """
        lease = await store.acquire("r", "w1", _SHORT)
        await asyncio.sleep(_SHORT * 2)
        assert await store.holder("r") is None  # lapsed: a rival could take it now
        await store.commit(replace(lease, ttl=30), make_commit("r", 0))
        assert (await store.read("r")).meta.seq == 0
        assert await store.holder("r") == "w1"
        with pytest.raises(LeaseHeldError, match="'w1'"):
            await store.acquire("r", "w2", 30)
        renewed = await store.renew(lease, 30)
        assert renewed.token == lease.token
        assert renewed.expires_at > lease.expires_at

    async def test_holder_is_read_without_taking_the_lease(self, store: Store) -> None:
        """``holder`` names the live holder, or None; asking changes no lease."""
        assert await store.holder("r") is None
        lease = await store.acquire("r", "w1", 30)
        assert await store.holder("r") == "w1"
        await store.commit(lease, make_commit("r", 0))  # still ours after the question
        await store.release(lease)
        assert await store.holder("r") is None

    async def test_lease_line_renews_from_another_thread(self, store: Store) -> None:
        """The lease line renews from a thread that is not the event loop's.

        Lapsed leases nobody took are renewed too; those another holder took are refused.
        """
        ours = await store.acquire("ours", "w1", _SHORT)
        lost = await store.acquire("lost", "w1", _SHORT)
        await asyncio.sleep(_SHORT * 2)
        rival = await store.acquire("lost", "w2", 30)
        line = store.lease_line()
        try:
            renewals = [replace(ours, ttl=30), replace(lost, ttl=30)]
            renewed, refused = await asyncio.to_thread(line.renew, renewals)
        finally:
            await asyncio.to_thread(line.close)
        assert isinstance(renewed, Lease)
        assert (renewed.token, renewed.ttl) == (ours.token, 30)
        assert isinstance(refused, LeaseLostError)
        assert refused.holder == "w2"
        with pytest.raises(LeaseHeldError, match="'w1'"):
            await store.acquire("ours", "w3", 30)
        await store.commit(rival, make_commit("lost", 0))

    async def test_release_frees_the_run_at_once(self, store: Store) -> None:
        """After release another owner acquires at once; the released lease is dead."""
        first = await store.acquire("r", "w1", 30)
        await store.release(first)
        await store.release(first)
        second = await store.acquire("r", "w2", 30)
        assert second.token > first.token
        with pytest.raises(LeaseLostError):
            await store.renew(first, 30)
        with pytest.raises(LeaseLostError):
            await store.commit(first, make_commit("r", 0))

    async def test_renew_keeps_the_lease(self, store: Store) -> None:
        """A renewed lease outlives its first ttl."""
        lease = await store.acquire("r", "w1", _SHORT)
        lease = await store.renew(lease, 30)
        await asyncio.sleep(_SHORT * 2)
        with pytest.raises(LeaseHeldError):
            await store.acquire("r", "w2", 30)
        await store.commit(lease, make_commit("r", 0))

    async def test_history_yields_committed_seqs_in_order(self, store: Store) -> None:
        """History yields exactly the committed seqs in ``[start, stop)``, in order."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 300)
        assert [s async for s, _ in store.history("r")] == list(range(300))
        window = [(s, r) async for s, r in store.history("r", start=5, stop=9)]
        assert window == [(s, b"record-%d" % s) for s in range(5, 9)]
        assert [s async for s, _ in store.history("r", start=298, stop=400)] == [298, 299]
        assert [s async for s, _ in store.history("r", start=7, stop=7)] == []

    async def test_history_list_is_what_history_yields(self, store: Store) -> None:
        """``history_list`` holds exactly what ``history`` yields, for any window."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 300)
        windows = ((0, None), (5, 9), (298, 400), (7, 7), (-3, 2), (299, None), (300, None))
        for start, stop in windows:
            listed = await store.history_list("r", start=start, stop=stop)
            assert listed == [item async for item in store.history("r", start=start, stop=stop)]
        assert [s for s, _ in await store.history_list("r")] == list(range(300))

    async def test_list_runs_filters_orders_and_pages(self, store: Store) -> None:
        """list_runs filters by status, orders by updated_at descending, honours limit/offset."""
        statuses = ["running", "waiting", "completed", "waiting", "failed"]
        for i, status in enumerate(statuses):
            lease = await store.acquire(f"run{i}", "w", 30)
            commit = make_commit(f"run{i}", 0, status=status, updated_at=_T0 + (i * 7) % 5)
            await store.commit(lease, commit)
        await store.acquire("leased-only", "w", 30)
        order = [m.run_id for m in await store.list_runs()]
        assert order == ["run2", "run4", "run1", "run3", "run0"]
        assert [m.run_id for m in await store.list_runs(status="waiting")] == ["run1", "run3"]
        assert [m.run_id for m in await store.list_runs(limit=2, offset=1)] == ["run4", "run1"]
        assert [m.run_id for m in await store.list_runs(status="waiting", offset=1)] == ["run3"]
        assert await store.list_runs(status="parked") == []
        failed = await store.list_runs(status="failed")
        assert failed == [make_commit("run4", 0, status="failed", updated_at=_T0 + 3).meta]

    async def test_runs_are_independent(self, store: Store) -> None:
        """Leases and commits of one run do not touch another."""
        a = await store.acquire("a", "w", 30)
        b = await store.acquire("b", "w", 30)
        await _fill(store, a, 3)
        await _fill(store, b, 1)
        assert ((await store.read("a")).meta.seq, (await store.read("b")).meta.seq) == (2, 0)
        with pytest.raises(InputError, match="'b'"):
            await store.commit(a, make_commit("b", 1))

    async def test_a_missing_last_record_is_refused_by_every_read(
        self, store: Store, journal_damage: JournalDamage
    ) -> None:
        """With the head's record gone, no read returns the run, even one needing no record."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 4, snapshot_every=3)  # a snapshot at the head, seq 3
        await _fill(store, await store.acquire("other", "w1", 30), 2)
        await journal_damage.drop_last_record("r")
        await _refused(store, "r", 3, 2)
        assert [s async for s, _ in store.history("other")] == [0, 1]  # other runs read

    async def test_a_rolled_back_head_is_refused_by_every_read(
        self, store: Store, journal_damage: JournalDamage
    ) -> None:
        """With records past the head, no read returns the run cut short."""
        lease = await store.acquire("r", "w1", 30)
        await _fill(store, lease, 5, snapshot_every=2)
        await journal_damage.set_head("r", 2)
        await _refused(store, "r", 2, 4)

    async def test_a_definition_put_is_got_back(self, store: Store) -> None:
        """The bytes put under a key are got back; a key never put reads as none."""
        key, body = _digest(b"graph: one"), b"graph: one"
        assert not await store.has_definition(key)
        assert await store.get_definition(key) is None
        await store.put_definition(key, body)
        assert await store.has_definition(key)
        assert await store.get_definition(key) == body
        assert await store.get_definition(_digest(b"other")) is None
        assert not await store.has_definition(_digest(b"other"))

    async def test_a_definition_put_again_keeps_the_first(self, store: Store) -> None:
        """Putting a key kept already is fine and writes nothing: the first bytes stay."""
        key = _digest(b"first")
        await store.put_definition(key, b"first")
        await store.put_definition(key, b"first")
        await store.put_definition(key, b"never kept")  # a digest is of one body only
        assert await store.get_definition(key) == b"first"
        results = await asyncio.gather(*(store.put_definition(key, b"first") for _ in range(5)))
        assert results == [None] * 5
        assert await store.get_definition(key) == b"first"

    async def test_a_definition_of_a_few_megabytes_round_trips(self, store: Store) -> None:
        """A large definition (3 MB of every byte value) comes back byte for byte."""
        body = bytes(range(256)) * (3 * 1024 * 4)
        key = _digest(body)
        await store.put_definition(key, body)
        assert await store.get_definition(key) == body
        assert await store.has_definition(key)

    async def test_definitions_are_apart_from_runs(self, store: Store) -> None:
        """A definition is no run; runs that finish or let their lease go leave it kept.

        No run owns one, so retention, which may expire a finished run, never removes it.
        """
        key = _digest(b"shared")
        await store.put_definition(key, b"shared")
        for run_id in ("a", "b"):
            lease = await store.acquire(run_id, "w1", 30)
            await store.commit(lease, make_commit(run_id, 0))
            await store.commit(lease, make_commit(run_id, 1, status="completed"))
            await store.release(lease)
        assert await store.get_definition(key) == b"shared"
        assert sorted(m.run_id for m in await store.list_runs()) == ["a", "b"]
        with pytest.raises(RunNotFoundError):
            await store.read(key)

    async def test_messages_are_kept_in_the_order_posted(self, store: Store) -> None:
        """Each run's inbox numbers its messages 1, 2, 3 in the order it took them in."""
        for index, text in enumerate((b"one", b"two", b"three"), 1):
            message, fresh = await store.post_message("r", f"m{index}", text, 100.0 + index)
            assert fresh
            assert message.position == index
            assert message.body == text
        await store.post_message("other", "m1", b"elsewhere", 1.0)
        kept = await store.messages("r")
        assert [(m.position, m.id, m.body) for m in kept] == [
            (1, "m1", b"one"),
            (2, "m2", b"two"),
            (3, "m3", b"three"),
        ]
        assert kept[0].at == 101.0
        assert kept[0].run_id == "r"
        assert [m.body for m in await store.messages("other")] == [b"elsewhere"]
        assert await store.messages("never") == []
        assert [m.id for m in await store.messages("r", after=1, limit=1)] == ["m2"]

    async def test_a_message_posted_again_under_its_id_is_taken_once(self, store: Store) -> None:
        """A second post of an id, even at once or with other bytes, answers the first."""
        first, fresh = await store.post_message("r", "same", b"first", 1.0)
        assert fresh
        again, fresh_again = await store.post_message("r", "same", b"second", 2.0)
        assert not fresh_again
        assert again == first
        posts = await asyncio.gather(
            *(store.post_message("r", f"burst-{i % 3}", b"x", 3.0) for i in range(9))
        )
        assert sum(fresh for _, fresh in posts) == 3
        kept = await store.messages("r")
        assert [m.position for m in kept] == [1, 2, 3, 4]
        assert len({m.id for m in kept}) == 4

    async def test_taken_messages_are_passed_over(self, store: Store) -> None:
        """The cursor only moves on, never past the last message; ids stay kept after it."""
        for index in range(1, 4):
            await store.post_message("r", f"m{index}", b"%d" % index, 1.0)
        await store.take_messages("r", 2)
        assert [m.id for m in await store.messages("r")] == ["m3"]
        await store.take_messages("r", 1)  # behind the cursor: nothing moves back
        assert [m.id for m in await store.messages("r")] == ["m3"]
        assert [m.id for m in await store.messages("r", after=0)] == ["m1", "m2", "m3"]
        await store.take_messages("r", 99)  # past the last: taken up to the last only
        assert await store.messages("r") == []
        again, fresh = await store.post_message("r", "m1", b"resent", 2.0)
        assert not fresh
        assert again.position == 1
        later, fresh = await store.post_message("r", "m4", b"4", 2.0)
        assert fresh
        assert later.position == 4
        assert [m.id for m in await store.messages("r")] == ["m4"]

    @_PER_STORE
    @given(ids=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=12))
    async def test_inbox_property(self, store: Store, ids: list[str]) -> None:
        """Any sequence of posts keeps each distinct id once, in first-posted order."""
        run_id = f"p-{uuid.uuid4().hex}"
        for message_id in ids:
            await store.post_message(run_id, message_id, message_id.encode(), 1.0)
        kept = await store.messages(run_id, limit=100)
        assert [m.id for m in kept] == list(dict.fromkeys(ids))
        assert [m.position for m in kept] == list(range(1, len(kept) + 1))

    async def test_stream_batches_append_read_and_drop_per_run(self, store: Store) -> None:
        """Live-event batches come back in the order appended, per run, until dropped."""
        assert await store.read_stream("r") == []
        for batch in (b"one", b"two", b"\x00three"):
            await store.append_stream("r", batch)
        await store.append_stream("other", b"theirs")
        assert await store.read_stream("r") == [b"one", b"two", b"\x00three"]
        await store.drop_stream("r")
        await store.drop_stream("r")  # idempotent
        assert await store.read_stream("r") == []
        assert await store.read_stream("other") == [b"theirs"]

    async def test_aclose_is_idempotent(self, store: Store) -> None:
        """Closing twice is fine."""
        await store.aclose()
        await store.aclose()


# ------------------------------------------------------------------------------ Redis


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Yield the URL of a Redis for tests, starting a private one if none is configured.

    Uses ``$PHASEGRAPH_TEST_REDIS_URL`` when set; otherwise starts ``redis-server`` on a
    free port of 127.0.0.1 with persistence off, in a temporary directory, and stops it
    on exit.

    Raises:
        StoreUnavailableError: Neither works; the message says how to fix it. Tests that
            need Redis then fail, never skip.
    """
    configured = os.environ.get(REDIS_URL_ENV)
    if configured:
        if not _answers_ping(configured, deadline=time.monotonic() + 5):
            raise StoreUnavailableError(f"{REDIS_URL_ENV}={configured!r} does not answer PING")
        yield configured
        return
    exe = shutil.which("redis-server")
    if exe is None:
        raise StoreUnavailableError(
            f"the tests need Redis: set {REDIS_URL_ENV} to a server's URL, "
            "or install redis-server (e.g. apt-get install redis-server)"
        )
    with tempfile.TemporaryDirectory(prefix="phasegraph-redis-") as workdir:
        process, url = _start_redis(exe, workdir)
        try:
            yield url
        finally:
            process.kill()  # a throwaway server with nothing to save
            process.wait()


def _start_redis(exe: str, workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    for _ in range(3):  # another process may grab the free port first: try a few
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        log = open(os.path.join(workdir, f"redis-{port}.log"), "wb")  # noqa: SIM115
        with log:
            process = subprocess.Popen([*argv, "--dir", workdir], stdout=log, stderr=log)
        url = f"redis://127.0.0.1:{port}/0"
        if started(process, url):
            return process, url
        process.kill()
        process.wait()
    raise StoreUnavailableError(f"redis-server ({exe}) did not start; see logs in {workdir}")


def started(process: subprocess.Popen[bytes], url: str, *, within: float = 10.0) -> bool:
    """Whether the ``redis-server`` ``process`` answers PING at ``url`` within ``within`` s."""
    deadline = time.monotonic() + within
    while process.poll() is None and time.monotonic() < deadline:
        if _answers_ping(url, deadline=time.monotonic()):
            return True
        time.sleep(0.02)
    return False


def _answers_ping(url: str, *, deadline: float) -> bool:
    while True:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        finally:
            client.close()


@contextlib.asynccontextmanager
async def isolated_redis_url(url: str, **options: str) -> AsyncIterator[str]:
    """``url`` under a key prefix no other test uses; its keys are deleted afterwards.

    For tests that hand a store URL to other processes (workers, a server).

    Args:
        url: A Redis URL, e.g. from :func:`redis_server`, or a Redis Cluster URL (from
            :func:`~phasegraph.testing.redis_cluster`).
        **options: More store URL options (such as ``ttl="60"``).
    """
    prefix = "pgtest" + uuid.uuid4().hex[:12]
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), ("prefix", prefix), *options.items()])
    try:
        yield urlunsplit(parts._replace(query=query))
    finally:
        async with open_store(url) as store:  # the client its work queue uses: either kind
            assert isinstance(store, RedisStore)
            client = store.queue_client()
        try:
            # On a cluster both calls go to every node (SCAN) or to each key's node (DEL).
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


@contextlib.asynccontextmanager
async def isolated_redis_store(url: str, **options: str) -> AsyncIterator[Store]:
    """A Redis store under a prefix of its own; its keys are deleted afterwards.

    Args:
        url: A Redis or Redis Cluster URL, as for :func:`isolated_redis_url`.
        **options: More store URL options (such as ``ttl="60"``).
    """
    async with isolated_redis_url(url, **options) as isolated, open_store(isolated) as store:
        yield store
