"""SQLite-only behaviour: the file layout, older layouts, what a commit writes, where a
run read is made."""

import asyncio
import contextlib
import dataclasses
import re
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import sqlite_db
from phasegraph import Engine
from phasegraph.errors import JournalHeadError, RunNotFoundError, StoreError
from phasegraph.store import _sqlite_layout as _layout_module
from phasegraph.store._sqlite_layout import SCHEMA_VERSION
from phasegraph.store.base import Lease
from phasegraph.store.sqlite import SqliteStore
from phasegraph.testing import make_commit
from store.old_layouts import OLD_SCHEMAS, V1_SCHEMA, old_file, sql

FIXTURES = Path(__file__).parent.parent / "fixtures"

_sql = sql


def _layout(path: Path) -> set[tuple[object, ...]]:
    return set(_sql(path, "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))


async def test_a_new_file_has_the_current_layout(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        await store.list_runs()
    assert _sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 3
    assert _layout(path) == {
        ("table", "runs"),
        ("table", "records"),
        ("table", "snapshots"),
        ("index", "runs_by_time"),
        ("table", "definitions"),
        ("table", "messages"),
        ("table", "messages_taken"),
        ("table", "streams"),
        ("index", "streams_run"),
    }
    tables = _sql(path, "SELECT sql FROM sqlite_master WHERE type = 'table'")
    assert not any("WITHOUT ROWID" in str(sql) for (sql,) in tables)  # rowid tables


@pytest.mark.parametrize("version", sorted(OLD_SCHEMAS))
async def test_an_older_file_is_read_and_written_in_its_own_layout(
    tmp_path: Path, version: int
) -> None:
    path = old_file(tmp_path / "runs.db", version)
    # A run as that version left it: a released lease, two steps, a snapshot at 0.
    _sql(
        path,
        "INSERT INTO runs VALUES ('old', 'g', 'waiting', 1, 10.0, 11.0, NULL, 3, 0)",
        "INSERT INTO records VALUES ('old', 0, x'00'), ('old', 1, x'01')",
        "INSERT INTO snapshots VALUES ('old', 0, x'aa')",
    )
    layout = _layout(path)
    async with SqliteStore(path) as store:
        stored = await store.read("old")
        assert (stored.seq, stored.snapshot, stored.records) == (1, b"\xaa", (b"\x01",))
        lease = await store.acquire("old", "w", 30)
        assert lease.token == 4
        await store.commit(lease, make_commit("old", 2, status="completed", updated_at=12.0))
        new = await store.acquire("new", "w", 30)
        await store.commit(new, make_commit("new", 0, status="waiting", updated_at=13.0))
        assert [m.run_id for m in await store.list_runs()] == ["new", "old"]
        assert [m.run_id for m in await store.list_runs(status="completed")] == ["old"]
        assert [seq async for seq, _ in store.history("old")] == [0, 1, 2]
    assert _sql(path, "PRAGMA user_version") == [(version,)]
    # Left as it was, no silent rewrite of the user's file, but for the tables added to
    # any version: definitions, and the runs' inboxes.
    added = {("table", "definitions"), ("table", "messages"), ("table", "messages_taken")}
    added |= {("table", "streams"), ("index", "streams_run")}
    assert _layout(path) == layout | added
    async with SqliteStore(path, read_only=True) as store:
        assert (await store.read("old")).records == (b"\x01", b"record-2")


async def test_a_file_written_by_version_2_reads_and_steps_on(tmp_path: Path) -> None:
    """A store phasegraph wrote in layout version 2 (``fixtures/stores/version2.db``: a
    finished ``hello`` run and a run of three commits, its lease released) is read in
    full and written on in its own layout."""
    path = tmp_path / "runs.db"
    shutil.copyfile(FIXTURES / "stores" / "version2.db", path)
    async with SqliteStore(path) as store:
        engine = Engine(store)
        done = await engine.get("hello-run")
        assert (str(done.status), done.seq) == ("completed", 8)
        assert done.data["message"] == "hello, old layout! (14 letters)"
        assert [record.seq for record in await engine.history("hello-run")] == list(range(9))
        lease = await store.acquire("partial", "w", 30)
        later = make_commit("partial", 3, status="completed", updated_at=4e9)
        await store.commit(lease, later)
        assert (await store.read("partial")).records == tuple(
            b"record-%d" % seq for seq in range(1, 4)
        )
        listed = await store.list_runs()
        assert [meta.run_id for meta in listed] == ["partial", "hello-run"]
    assert _sql(path, "PRAGMA user_version") == [(2,)]


async def test_an_unknown_older_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _sql(path, *V1_SCHEMA[:-1], "PRAGMA user_version = 0")
    async with SqliteStore(path) as store:
        with pytest.raises(StoreError, match=rf"{path}.*schema version 0 is unknown"):
            await store.list_runs()


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    page_size = _sql(path, "PRAGMA page_size")[0][0]
    assert isinstance(page_size, int)
    return (wal.stat().st_size - 32) // (page_size + 24)  # 32-byte header, 24 per frame


async def _steps_of(path: Path, record: bytes, steps: int = 150) -> tuple[float, float]:
    """WAL frames and new database pages per commit of ``record``, in a store of 21 runs."""
    async with SqliteStore(path) as store:
        # Other runs, so the listing index and the runs table are not all one page.
        for n in range(20):
            lease = await store.acquire(f"other-{n}", "w", 30)
            await store.commit(lease, make_commit(f"other-{n}", 0))
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        frames, pages = _wal_frames(path), _sql(path, "PRAGMA page_count")[0][0]
        for seq in range(1, steps + 1):
            await store.commit(lease, make_commit("r", seq, record=record))
        frames = _wal_frames(path) - frames
        pages = _sql(path, "PRAGMA page_count")[0][0] - pages  # type: ignore[operator]
    return frames / steps, pages / steps


async def test_a_step_writes_about_two_pages(tmp_path: Path) -> None:
    """A commit rewrites the run's row and a records leaf, little more.

    Schema version 2 wrote three pages a step and more on every leaf split (its listing
    index changed every step, its records tree rebalanced three leaves to split one);
    version 1 wrote five. Each page is a full WAL frame.
    """
    frames, _ = await _steps_of(tmp_path / "runs.db", bytes(187))
    assert frames <= 2.3, frames


async def test_a_1_5_kb_record_shares_its_leaf(tmp_path: Path) -> None:
    """Two records of 1.5 KB fit on one 4 KB page: no overflow page of their own.

    A clustered (run_id, seq) key keeps about 1 KB of a row on its leaf and moves the
    rest to an overflow page, one per record (version 2: more than one page a record).
    """
    _, pages = await _steps_of(tmp_path / "runs.db", bytes(1500))
    assert pages <= 0.55, pages


async def test_a_seq_past_what_a_record_key_holds_is_refused_naming_the_run(
    tmp_path: Path,
) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        with pytest.raises(StoreError, match=r"run 'r' reached seq 4294967296"):
            await store.commit(lease, make_commit("r", 1 << 32))
        assert (await store.read("r")).meta.seq == 0


# --------------------------------------------------------------------------- run reads


class _Hops:
    """Counts the calls a store hands to its worker thread."""

    def __init__(self, store: SqliteStore) -> None:
        self.count = 0
        call = store._worker.call

        async def counted(fn: object, *args: object) -> object:
            self.count += 1
            return await call(fn, *args)  # type: ignore[arg-type]

        store._worker.call = counted  # type: ignore[method-assign]


class _BusyOnce:
    """A connection whose next read on the event-loop thread finds the file locked.

    As SQLite does: a deferred ``BEGIN`` takes no lock, the first ``SELECT`` after it does.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.busy = True

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        on_loop = threading.current_thread() is threading.main_thread()
        if sql.lstrip().upper().startswith("SELECT") and self.busy and on_loop:
            assert self.conn.in_transaction  # the read's own BEGIN came first
            self.busy = False
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise exc
        return self.conn.execute(sql, *args)


async def _run_of(store: SqliteStore, steps: int) -> Lease:
    """Run ``r`` with ``steps`` commits, a snapshot every fourth; its lease."""
    lease = await store.acquire("r", "w", 30)
    for seq in range(steps):
        snapshot = b"snap-%d" % seq if seq % 4 == 0 else None
        await store.commit(lease, make_commit("r", seq, snapshot=snapshot))
    return lease


async def test_a_run_read_takes_no_hop_to_the_worker_when_the_connection_is_free(
    tmp_path: Path,
) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        await _run_of(store, 7)
        hops = _Hops(store)
        stored = await store.read("r")
        assert (stored.seq, stored.snapshot_seq, stored.snapshot) == (6, 4, b"snap-4")
        assert stored.records == (b"record-5", b"record-6")
        assert (await store.read("r", 2)).records == (b"record-1", b"record-2")
        assert hops.count == 0
        with pytest.raises(RunNotFoundError):
            await store.read("r", 9)
        with pytest.raises(RunNotFoundError):
            await store.read("missing")
        assert hops.count == 0
        assert not store._conn.in_transaction  # type: ignore[union-attr]


async def test_a_run_read_waits_on_the_worker_when_the_connection_is_busy(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        await _run_of(store, 7)
        hops = _Hops(store)
        with store._lock:  # the worker (or a commit) is using the connection
            pending = asyncio.ensure_future(store.read("r"))
            await asyncio.sleep(0.01)
            assert hops.count == 1
            assert not pending.done()
        assert (await pending).records == (b"record-5", b"record-6")


async def test_a_run_read_that_finds_a_lock_is_left_to_the_worker(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "runs.db") as store:
        await _run_of(store, 7)
        hops = _Hops(store)
        conn = store._conn
        assert conn is not None
        store._conn = _BusyOnce(conn)  # type: ignore[assignment]
        try:
            stored = await store.read("r")
        finally:
            store._conn = conn
        assert stored.records == (b"record-5", b"record-6")
        assert hops.count == 1
        assert not conn.in_transaction


async def test_a_read_only_store_reads_runs_on_the_loop_too(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        lease = await _run_of(store, 7)
        async with SqliteStore(path, read_only=True) as reader:
            assert (await reader.read("r")).records == (b"record-5", b"record-6")
            hops = _Hops(reader)
            assert (await reader.read("r", 4)).records == ()
            await store.commit(lease, make_commit("r", 7))  # another connection writes
            assert (await reader.read("r")).records == (b"record-5", b"record-6", b"record-7")
            assert hops.count == 0


@pytest.mark.parametrize("batch", [1, 2])
async def test_a_commit_onto_a_head_moved_back_is_refused_and_writes_nothing(
    tmp_path: Path, batch: int
) -> None:
    """A head moved back outside phasegraph (records stored past it) refuses the commit
    that would land on a stored record, naming the journal's head, and rolls it back
    whole: alone in its transaction, or beside another run's commit in one batch."""
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        lease = await store.acquire("r", "w", 30)
        for seq in range(3):
            await store.commit(lease, make_commit("r", seq))
        other = await store.acquire("other", "w", 30)
        await store.commit(other, make_commit("other", 0))
    with sqlite_db(path) as conn:
        conn.execute("UPDATE runs SET seq = 1 WHERE run_id = 'r'")
    async with SqliteStore(path) as store:  # both leases are still held
        for writer in ("x", "y"):  # several writers: concurrent commits share a batch
            await store.acquire(writer, "w", 30)
        commits = [store.commit(lease, make_commit("r", 2))]
        if batch == 2:
            commits.append(store.commit(other, make_commit("other", 1)))
        outcomes = await asyncio.gather(*commits, return_exceptions=True)
    assert isinstance(outcomes[0], JournalHeadError), outcomes
    assert "its head is seq 1 but its journal goes on to seq 2" in str(outcomes[0])
    with sqlite_db(path) as conn:
        assert conn.execute("SELECT seq FROM runs WHERE run_id = 'r'").fetchone() == (1,)
        blobs = conn.execute(
            "SELECT blob FROM records WHERE key >> 32 = "
            "(SELECT num FROM runs WHERE run_id = 'r') ORDER BY key"
        )
        assert [row[0] for row in blobs] == [make_commit("r", s).record for s in range(3)]
    if batch == 2:
        assert outcomes[1] is None


# --------------------------------------------------------------------------- listing


@settings(max_examples=25)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=1.7e9, max_value=1.7e9 + 600, allow_nan=False),
            st.sampled_from(["running", "waiting", "completed"]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=1, max_value=5),
)
def test_listing_orders_by_update_time_across_minutes(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[float, str]],
    offset: int,
    limit: int,
) -> None:
    """The index orders by the minute of ``updated_at``; pages still follow ``updated_at``
    itself, then run id, whatever minutes, statuses and later commits the runs have."""

    async def check() -> None:
        path = tmp_path_factory.mktemp("listing") / "runs.db"
        latest: dict[str, tuple[float, str]] = {}
        async with SqliteStore(path) as store:
            leases: dict[str, Lease] = {}
            for index, (updated_at, status) in enumerate(steps):
                run_id = f"run-{index % 4}"  # some runs commit again, moving in the order
                if run_id not in leases:
                    leases[run_id] = await store.acquire(run_id, "w", 30)
                seq = sum(1 for i in range(index) if i % 4 == index % 4)
                commit = make_commit(run_id, seq, status=status, updated_at=updated_at)
                await store.commit(leases[run_id], commit)
                latest[run_id] = (updated_at, status)
            expected = sorted(latest, key=lambda run: (-latest[run][0], run))
            listed = await store.list_runs(limit=limit, offset=offset)
            assert [m.run_id for m in listed] == expected[offset : offset + limit]
            for status in ("running", "completed"):
                wanted = [run for run in expected if latest[run][1] == status]
                got = await store.list_runs(status=status)
                assert [m.run_id for m in got] == wanted

    asyncio.run(check())


def test_every_statement_binds_its_parameters_by_position_on_every_layout() -> None:
    """Plain ``?`` placeholders only: Python 3.12.0 to 3.12.3 warn of numbered ones bound
    to a sequence (and the suite makes warnings errors), whatever interpreter runs this."""
    for version, statements in _layout_module._STATEMENTS.items():
        for field in dataclasses.fields(statements):
            statement = getattr(statements, field.name)
            assert not re.search(r"[?:@$][0-9A-Za-z_]", statement.sql), (version, field.name)


def test_a_statement_written_with_numbered_placeholders_takes_its_parameters_in_order() -> None:
    statement = _layout_module._statement("SELECT ?2, ?1, ?2 || ?3")
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        assert statement.run(conn, ("a", "b", "c")).fetchone() == ("b", "a", "bc")
        one = _layout_module._statement("SELECT ?2")  # one index: still a tuple of one
        assert one.run(conn, ("a", "b")).fetchone() == ("b",)
    with pytest.raises(ValueError, match="mixed"):
        _layout_module._statement("SELECT ?1, ?")
