"""The SQLite layouts phasegraph wrote before the current one, verbatim, to build old files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

_APPLICATION_ID = 0x50475244  # "PGRD"

V1_SCHEMA = (
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
    f"PRAGMA application_id = {_APPLICATION_ID}",
    "PRAGMA user_version = 1",
)

V2_SCHEMA = (
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        graph TEXT, status TEXT, seq INTEGER NOT NULL DEFAULT -1,
        created_at REAL, updated_at REAL,
        lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
        lease_expires REAL NOT NULL DEFAULT 0) WITHOUT ROWID""",
    "CREATE INDEX runs_by_time ON runs (updated_at DESC, run_id, status) WHERE seq >= 0",
    """CREATE TABLE records (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE snapshots (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    f"PRAGMA application_id = {_APPLICATION_ID}",
    "PRAGMA user_version = 2",
)

# Version 3 as written before files got the ``definitions`` table (same user_version).
V3_SCHEMA = (
    """CREATE TABLE runs (
        num INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        graph TEXT, status TEXT, seq INTEGER NOT NULL DEFAULT -1,
        created_at REAL, updated_at REAL, listed INTEGER,
        lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
        lease_expires REAL NOT NULL DEFAULT 0)""",
    "CREATE INDEX runs_by_time ON runs (listed DESC, status)",
    "CREATE TABLE records (key INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
    "CREATE TABLE snapshots (key INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
    f"PRAGMA application_id = {_APPLICATION_ID}",
    "PRAGMA user_version = 3",
)

OLD_SCHEMAS = {1: V1_SCHEMA, 2: V2_SCHEMA}
"""The older layouts, each with statements of its own."""

WITHOUT_DEFINITIONS = {**OLD_SCHEMAS, 3: V3_SCHEMA}
"""Every layout as phasegraph wrote it before the ``definitions`` table."""


def sql(path: Path, *statements: str) -> list[tuple[object, ...]]:
    """Run ``statements`` on ``path`` in autocommit mode; every row they return."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows += conn.execute(statement).fetchall()
        return rows
    finally:
        conn.close()


def old_file(path: Path, version: int) -> Path:
    """An empty store file in the layout of ``version`` (WAL mode, as the store sets).

    Version 3 is the current layout without the ``definitions`` table.
    """
    sql(path, "PRAGMA journal_mode=WAL", *WITHOUT_DEFINITIONS[version])
    return path
