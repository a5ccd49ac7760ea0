"""The SQLite store's file layout: the tables it creates, and the files it agrees to open.

A new file gets the layout of :data:`SCHEMA_VERSION`. Version 1 (rowid tables with the
same columns, plus an index by status) is opened and written as it is: the statements of
``phasegraph.store.sqlite`` mean the same on both layouts; version 1 only writes more
pages per step. A file of another application, of a newer version, or of an unknown one
is refused with a :class:`~phasegraph.errors.StoreError` naming it, and left alone.

A store opened read-only (:func:`connect_read_only`) never writes the file nor its
folder, so read-only commands work on a store in a read-only location.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from phasegraph.errors import StoreError

__all__ = ["SCHEMA_VERSION", "check_layout", "connect_read_only", "foreign_file_error"]

SCHEMA_VERSION: Final = 2
"""The layout version new files get (``PRAGMA user_version``); version 1 is read too."""

_APPLICATION_ID: Final = 0x50475244  # "PGRD": marks the file as a phasegraph run store
_READABLE_VERSIONS: Final = frozenset({1, SCHEMA_VERSION})

_SCHEMA: Final = (
    # Every table is clustered on its key (WITHOUT ROWID): no second b-tree per table
    # for the key, so a step changes one records leaf and one runs leaf.
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        graph TEXT, status TEXT, seq INTEGER NOT NULL DEFAULT -1,
        created_at REAL, updated_at REAL,
        lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
        lease_expires REAL NOT NULL DEFAULT 0) WITHOUT ROWID""",
    # The one index a commit updates (each index is one more page per commit): it
    # serves listing in order, and carries the status so listing by status filters
    # inside it instead of a second index.
    "CREATE INDEX runs_by_time ON runs (updated_at DESC, run_id, status) WHERE seq >= 0",
    """CREATE TABLE records (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE snapshots (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    f"PRAGMA application_id = {_APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


def check_layout(conn: sqlite3.Connection, path: Path, *, create: bool = True) -> bool:
    """Create the layout in an empty file, or check that the file holds one we read.

    Runs in its own ``BEGIN IMMEDIATE`` transaction, so two processes opening a new file
    at once create the tables once (a plain ``BEGIN`` when ``create`` is false).

    Returns:
        Whether the file has the layout now (false only for an empty file not created).

    Raises:
        StoreError: The file is another application's, or of a newer or unknown version.
    """
    conn.execute("BEGIN IMMEDIATE" if create else "BEGIN")
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id == 0 and version == 0:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise foreign_file_error(path, "it holds tables that are not phasegraph's")
            if not create:
                conn.execute("ROLLBACK")
                return False
            for statement in _SCHEMA:
                conn.execute(statement)
        elif app_id != _APPLICATION_ID:
            raise foreign_file_error(path, f"its application id is {app_id:#x}")
        elif version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store {str(path)!r} has schema version {version}, newer "
                f"than this phasegraph reads ({SCHEMA_VERSION}); upgrade phasegraph"
            )
        elif version not in _READABLE_VERSIONS:
            raise foreign_file_error(path, f"its schema version {version} is unknown")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return True


def connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection that never writes ``path`` or its folder, for commands that only read.

    ``mode=ro`` opens the file read-only, but a file in WAL mode also needs its WAL index
    (``-shm``) beside it, which SQLite cannot create in a read-only folder. When no WAL
    file is left there either (every writer closed cleanly, and none can start in that
    folder), the file is opened ``immutable``: as it is, without locks. A file that is not
    there yet, or is still empty, reads as an empty store.

    Raises:
        StoreError: The file is another application's, or of a newer or unknown version.
        sqlite3.Error: The file cannot be read.
    """
    if not path.exists():
        return _empty_store(path)
    uri = path.as_uri()
    conn = _connect(f"{uri}?mode=ro", timeout)
    try:
        found = check_layout(conn, path, create=False)
    except sqlite3.OperationalError as exc:
        conn.close()
        cannot_index = exc.sqlite_errorname in ("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN")
        if not cannot_index or Path(f"{path}-wal").exists():
            raise
        conn = _connect(f"{uri}?mode=ro&immutable=1", timeout)
        try:
            found = check_layout(conn, path, create=False)
        except BaseException:
            conn.close()
            raise
    except BaseException:
        conn.close()
        raise
    if found:
        return conn
    conn.close()
    return _empty_store(path)


def _empty_store(path: Path) -> sqlite3.Connection:
    """An in-memory store with the layout and no runs: what a missing file reads as."""
    conn = _connect(":memory:", 0)
    check_layout(conn, path)
    return conn


def _connect(uri: str, timeout: float) -> sqlite3.Connection:
    # Whichever thread holds the store's lock uses the connection (see the store).
    return sqlite3.connect(
        uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
    )


def foreign_file_error(path: Path, why: str) -> StoreError:
    """The error for a file that is not a phasegraph run store (``why`` says how)."""
    return StoreError(
        f"{str(path)!r} is not a phasegraph run store: {why}; point --store at another file"
    )
