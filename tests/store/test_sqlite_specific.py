"""SQLite-only behaviour: the file layout, older layouts, and what a commit writes."""

import sqlite3
from pathlib import Path

import pytest

from phasegraph.errors import StoreError
from phasegraph.store.sqlite import SCHEMA_VERSION, SqliteStore
from phasegraph.testing import make_commit

# The layout phasegraph wrote before schema version 2, verbatim.
_V1_SCHEMA = (
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        graph TEXT, status TEXT, seq INTEGER NOT NULL DEFAULT -1,
        created_at REAL, updated_at REAL,
        lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
        lease_expires REAL NOT NULL DEFAULT 0)""",
    "CREATE INDEX runs_by_time ON runs (updated_at DESC) WHERE seq >= 0",
    "CREATE INDEX runs_by_status ON runs (status, updated_at DESC) WHERE seq >= 0",
    """CREATE TABLE records (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq))""",
    """CREATE TABLE snapshots (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq))""",
    f"PRAGMA application_id = {0x50475244}",  # "PGRD"
    "PRAGMA user_version = 1",
)


def _sql(path: Path, *statements: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows += conn.execute(statement).fetchall()
        return rows
    finally:
        conn.close()


def _layout(path: Path) -> set[tuple[object, ...]]:
    return set(_sql(path, "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))


async def test_a_new_file_has_the_current_layout(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        await store.list_runs()
    assert _sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 2
    assert _layout(path) == {
        ("table", "runs"),
        ("table", "records"),
        ("table", "snapshots"),
        ("index", "runs_by_time"),
    }
    tables = _sql(path, "SELECT sql FROM sqlite_master WHERE type = 'table'")
    assert all(str(sql).endswith("WITHOUT ROWID") for (sql,) in tables)


async def test_a_version_1_file_is_read_and_written_in_its_own_layout(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _sql(path, "PRAGMA journal_mode=WAL", *_V1_SCHEMA)
    # A run as version 1 left it: a released lease, two steps, a snapshot at 0.
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
    assert _sql(path, "PRAGMA user_version") == [(1,)]
    assert _layout(path) == layout  # left as it was: no silent rewrite of the user's file


async def test_an_unknown_older_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _sql(path, *_V1_SCHEMA[:-1], "PRAGMA user_version = 0")
    async with SqliteStore(path) as store:
        with pytest.raises(StoreError, match=rf"{path}.*schema version 0 is unknown"):
            await store.list_runs()


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    page_size = _sql(path, "PRAGMA page_size")[0][0]
    assert isinstance(page_size, int)
    return (wal.stat().st_size - 32) // (page_size + 24)  # 32-byte header, 24 per frame


async def test_a_step_writes_about_three_pages(tmp_path: Path) -> None:
    """A commit rewrites the run's row, its index entry and a records leaf, little more.

    Schema version 1 wrote five pages a step (two more indexes and the records rowid
    index); each page is a full WAL frame.
    """
    path = tmp_path / "runs.db"
    async with SqliteStore(path) as store:
        # Other runs, so the listing index and the runs table are not all one page.
        for n in range(20):
            lease = await store.acquire(f"other-{n}", "w", 30)
            await store.commit(lease, make_commit(f"other-{n}", 0))
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        before = _wal_frames(path)
        steps = 150
        for seq in range(1, steps + 1):
            await store.commit(lease, make_commit("r", seq, record=bytes(187)))
        per_step = (_wal_frames(path) - before) / steps
    assert per_step <= 4.0
