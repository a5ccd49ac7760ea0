"""SQLite group commit: concurrent runs share transactions, and each keeps its own outcome."""

import asyncio
import sqlite3
from pathlib import Path

import pytest

from builders import sqlite_db
from phasegraph.errors import LeaseLostError, SequenceConflictError, StoreUnavailableError
from phasegraph.store.base import Lease
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import make_commit


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    with sqlite_db(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return (wal.stat().st_size - 32) // (page_size + 24)  # 32-byte header, 24 per frame


async def _started(store: SqliteStore, runs: int) -> list[Lease]:
    """``runs`` runs with their seq 0 committed, one after another."""
    leases = []
    for n in range(runs):
        lease = await store.acquire(f"run-{n}", "w", 30)
        await store.commit(lease, make_commit(lease.run_id, 0))
        leases.append(lease)
    return leases


async def _records(store: SqliteStore, run_id: str) -> list[tuple[int, bytes]]:
    return [row async for row in store.history(run_id)]


async def test_concurrent_runs_share_transactions_and_keep_their_own_records(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        leases = await _started(store, 30)
        before = _wal_frames(path)
        for seq in range(1, 4):
            await asyncio.gather(
                *(
                    store.commit(
                        lease,
                        make_commit(
                            lease.run_id, seq, record=b"%s/%d" % (lease.run_id.encode(), seq)
                        ),
                    )
                    for lease in leases
                )
            )
        frames = _wal_frames(path) - before
        for lease in leases:
            rows = await _records(store, lease.run_id)
            own = [(seq, b"%s/%d" % (lease.run_id.encode(), seq)) for seq in range(1, 4)]
            assert rows[1:] == own
            assert (await store.read(lease.run_id)).meta.seq == 3
    # 90 commits, each alone in its transaction, write at least two pages each (the
    # run's row and its records leaf); three shared transactions write far fewer.
    assert frames < 90


async def test_a_refused_commit_in_a_batch_leaves_the_others_committed(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        leases = await _started(store, 4)
        taken = await store.acquire("stolen", "w", 30)
        await store.commit(taken, make_commit("stolen", 0))
        stale = Lease(
            run_id="stolen", owner="w", token=taken.token - 1, expires_at=taken.expires_at
        )
        outcomes = await asyncio.gather(
            store.commit(leases[0], make_commit("run-0", 1)),
            store.commit(leases[1], make_commit("run-1", 5)),  # not head + 1
            store.commit(leases[2], make_commit("run-2", 1)),
            store.commit(stale, make_commit("stolen", 1)),  # not the current lease
            store.commit(leases[3], make_commit("run-3", 1)),
            return_exceptions=True,
        )
        assert [outcomes[n] for n in (0, 2, 4)] == [None, None, None]
        assert isinstance(outcomes[1], SequenceConflictError)
        assert isinstance(outcomes[3], LeaseLostError)
        heads = {lease.run_id: (await store.read(lease.run_id)).meta.seq for lease in leases}
        assert heads == {"run-0": 1, "run-1": 0, "run-2": 1, "run-3": 1}
        assert (await store.read("stolen")).meta.seq == 0


async def test_a_commit_failing_halfway_in_a_batch_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        leases = await _started(store, 3)
        # The records insert of run-1 fails after its head was moved in the same commit.
        with sqlite_db(path) as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON records WHEN NEW.key >> 32 = "
                "(SELECT num FROM runs WHERE run_id = 'run-1') "
                "BEGIN SELECT RAISE(ABORT, 'planted failure'); END"
            )
        outcomes = await asyncio.gather(
            *(store.commit(lease, make_commit(lease.run_id, 1)) for lease in leases),
            return_exceptions=True,
        )
        assert [outcomes[0], outcomes[2]] == [None, None]
        assert isinstance(outcomes[1], StoreUnavailableError)
        assert "planted failure" in str(outcomes[1])
        heads = [(await store.read(lease.run_id)).meta.seq for lease in leases]
        assert heads == [1, 0, 1]  # run-1's head move was rolled back with its insert


async def test_a_commit_waits_for_another_process_writing_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        (lease,) = await _started(store, 1)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        try:
            commit = asyncio.create_task(store.commit(lease, make_commit("run-0", 1)))
            ticks = 0
            while ticks < 20:  # the loop keeps turning while the commit waits
                await asyncio.sleep(0.005)
                ticks += 1
            assert not commit.done()
        finally:
            other.execute("COMMIT")
            other.close()
        await commit
        assert (await store.read("run-0")).meta.seq == 1


async def test_a_cancelled_caller_still_has_its_commit_written_once(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        leases = await _started(store, 2)
        first = asyncio.create_task(store.commit(leases[0], make_commit("run-0", 1)))
        second = asyncio.create_task(store.commit(leases[1], make_commit("run-1", 1)))
        await asyncio.sleep(0)  # both queued in one batch
        first.cancel()
        await second
        with pytest.raises(asyncio.CancelledError):
            await first
        # The retry of a commit that was written anyway is a no-op, as after a lost reply.
        await store.commit(leases[0], make_commit("run-0", 1))
        assert [seq for seq, _ in await _records(store, "run-0")] == [0, 1]
