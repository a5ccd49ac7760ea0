"""The SQLite store's file layout: the tables it creates, and the files it agrees to open.

A new file gets the layout of :data:`SCHEMA_VERSION` (3). Older layouts are opened and
written as they are, each with the statements of its own (:class:`Statements`), never
rewritten: version 2 (every table clustered on ``(run_id, seq)``) and version 1 (rowid
tables with the same columns, plus an index by status) share one set; they only write
more pages per step. A file of another application, of a newer version, or of an
unknown one is refused with a :class:`~phasegraph.errors.StoreError` naming it, and left
alone.

Tables are added to a file of any version, when a writable store opens it:
``definitions`` (:data:`DEFINITIONS_TABLE`: a run definition's bytes under their digest,
shared by runs and removed by none), and the runs' inboxes (:data:`INBOX_TABLES`:
``messages``, one row per message keyed by ``(run_id, position)`` with its sender's id
unique per run, and ``messages_taken``, each run's cursor), and the durable live streams
(:data:`STREAMS_TABLE`: batches of live events of turns in flight). They are the same in every
layout and no older phasegraph reads the file differently for them, so they change no
``user_version``; a file opened only read-only since may lack them, and then keeps no
definition and no message.

Version 3 is laid out so that a step rewrites two pages, each a whole WAL frame: the
run's ``runs`` row and the ``records`` leaf its record lands in.

* ``runs`` is a rowid table: the rowid (``num``) numbers the run, ``run_id`` is unique
  (an index that never changes after the run is created);
* ``records`` and ``snapshots`` are rowid tables keyed by ``num << 32 | seq``: a run's
  rows are one key range, a record of up to about 4 KB stays on its leaf (a clustered
  ``(run_id, seq)`` key moves anything past about 1 KB to an overflow page of its own),
  and the newest run appends on the right edge of the tree, where a full leaf is split
  by starting a new one instead of rebalancing three;
* listing in order uses ``runs_by_time`` on ``(listed DESC, status)``, where ``listed``
  is ``updated_at`` in whole minutes: its entry moves when the minute or the status
  changes, not every step, and the minutes order runs as ``updated_at`` does.

A store opened read-only (:func:`connect_read_only`) never writes the file nor its
folder, so read-only commands work on a store in a read-only location.
"""

from __future__ import annotations

import operator
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from phasegraph.errors import StoreError

__all__ = [
    "DEFINITIONS_TABLE",
    "INBOX_TABLES",
    "MAX_SEQ",
    "SCHEMA_VERSION",
    "STREAMS_TABLE",
    "Statement",
    "Statements",
    "check_layout",
    "connect_read_only",
    "foreign_file_error",
]

SCHEMA_VERSION: Final = 3
"""The layout version new files get (``PRAGMA user_version``); versions 1 and 2 are read too."""

MAX_SEQ: Final = (1 << 32) - 1
"""The last seq a run can have in version 3 (the low 32 bits of a record's key)."""

DEFINITIONS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS definitions (key TEXT PRIMARY KEY, body BLOB NOT NULL)"
)
"""The table of run definitions, made in a new file and added to an older one (any version)."""

INBOX_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS messages (
        run_id TEXT NOT NULL, position INTEGER NOT NULL, id TEXT NOT NULL,
        body BLOB NOT NULL, at REAL NOT NULL,
        PRIMARY KEY (run_id, position), UNIQUE (run_id, id))""",
    """CREATE TABLE IF NOT EXISTS messages_taken (
        run_id TEXT PRIMARY KEY, position INTEGER NOT NULL)""",
)
"""The runs' inboxes, made in a new file and added to an older one (any version)."""

STREAMS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS streams "
    "(id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, batch BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS streams_run ON streams (run_id, id)",
)
"""The durable live streams (batches of live events of turns in flight), made like
:data:`DEFINITIONS_TABLE`."""

_APPLICATION_ID: Final = 0x50475244  # "PGRD": marks the file as a phasegraph run store

_SCHEMA: Final = (
    """CREATE TABLE runs (
        num INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        graph TEXT, status TEXT, seq INTEGER NOT NULL DEFAULT -1,
        created_at REAL, updated_at REAL, listed INTEGER,
        lease_owner TEXT, lease_token INTEGER NOT NULL DEFAULT 0,
        lease_expires REAL NOT NULL DEFAULT 0)""",
    # Not partial: a partial index's condition (seq >= 0) would name a column every
    # commit sets, and SQLite then rewrites the entry each time.
    "CREATE INDEX runs_by_time ON runs (listed DESC, status)",
    "CREATE TABLE records (key INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
    "CREATE TABLE snapshots (key INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
    f"PRAGMA application_id = {_APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


Params = tuple[Any, ...]


class Statement(NamedTuple):
    """One statement's SQL, with plain ``?`` placeholders, and its parameters' order.

    Statements are written with numbered placeholders (``?1``), so that a layout's
    statement takes the same parameters as the other layouts' whatever order it uses
    them in, and how often. Python 3.12 before 3.12.4 (Ubuntu 24.04's, for one) warns of
    numbered placeholders bound to a sequence, taking them for names, so they are made
    plain ones here, and :meth:`run` binds the parameters in their order.
    """

    sql: str
    bind: Callable[[Params], Params]

    def run(self, conn: sqlite3.Connection, params: Params) -> sqlite3.Cursor:
        """Execute the statement on ``conn`` with ``params`` (in the documented order)."""
        return conn.execute(self.sql, self.bind(params))


_NUMBERED_MARK: Final = re.compile(r"\?(\d+)")


def _statement(text: str) -> Statement:
    """``text`` with its numbered placeholders made plain, and the order they take."""
    order = [int(number) - 1 for number in _NUMBERED_MARK.findall(text)]
    sql = _NUMBERED_MARK.sub("?", text)
    if order and sql.count("?") != len(order):
        raise ValueError(f"plain and numbered placeholders mixed: {text!r}")
    if order == list(range(len(order))):
        return Statement(sql, tuple)  # each parameter once, in order: bound as given
    if len(order) == 1:
        only = order[0]
        return Statement(sql, lambda params: (params[only],))
    return Statement(sql, operator.itemgetter(*order))


@dataclass(frozen=True, slots=True)
class Statements:
    """The SQL of every store operation that depends on the layout, for one version.

    Each takes the same parameters on every layout, in the order given, through its
    ``bind`` (see :class:`Statement`). A commit's statements take theirs in the order the
    current layout's SQL uses them, a value used twice given twice: there they are bound
    as given, with no reordering on the path every step takes.

    Attributes:
        read_meta: ``(run_id)`` → the run's metadata columns (``run_id, graph, status,
            seq, created_at, updated_at``) and the seq of its last record (or NULL).
        move_head: ``(graph, seq, created_at, updated_at, lease expiry, run_id, previous
            seq, token)``: moves the head if the lease and the head agree.
        move_status: ``(status, updated_at, run_id, status, updated_at)``, made after
            ``move_head`` moved it: sets the status (and the listing's minute) where it
            changed.
        insert_record: ``(run_id, seq, blob)``.
        insert_snapshot: ``(run_id, seq, blob)``.
        last_record: ``(run_id)`` → the seq of the run's last record, or NULL.
        record_at: ``(run_id, seq)`` → that record's blob.
        nearest_snapshot: ``(run_id, seq)`` → ``(seq, blob)`` of the last snapshot at or
            below ``seq``.
        records_after: ``(run_id, after, upto)`` → blobs of ``after < seq <= upto``.
        records_from: ``(run_id, start, stop, limit)`` → ``(seq, blob)`` rows.
        list_all: ``(limit, offset)`` → metadata rows and the seq of each run's last
            record (or NULL), most recently updated first.
        list_status: ``(status, limit, offset)`` → the same, of one status.
    """

    read_meta: Statement
    move_head: Statement
    move_status: Statement
    insert_record: Statement
    insert_snapshot: Statement
    last_record: Statement
    record_at: Statement
    nearest_snapshot: Statement
    records_after: Statement
    records_from: Statement
    list_all: Statement
    list_status: Statement


_META_COLUMNS: Final = "run_id, graph, status, seq, created_at, updated_at"
# Neither the status nor the minute is set here: an indexed column in SET rewrites the
# index entry even when its value is the same (move_status sets them when they change).
_MOVE_HEAD: Final = _statement(
    "UPDATE runs SET graph = ?, seq = ?, created_at = ?, updated_at = ?, "
    "lease_expires = MAX(lease_expires, ?) "
    "WHERE run_id = ? AND seq = ? AND lease_token = ? AND lease_owner IS NOT NULL"
)

# Versions 1 and 2: records and snapshots keyed by (run_id, seq).
_KEYED_LAST: Final = "(SELECT max(seq) FROM records WHERE records.run_id = runs.run_id)"
_KEYED: Final = Statements(
    # max() over the records' key prefix is one seek to the end of the run's records.
    read_meta=_statement(
        f"SELECT {_META_COLUMNS}, {_KEYED_LAST} FROM runs WHERE run_id = ? AND seq >= 0"
    ),
    move_head=_MOVE_HEAD,
    move_status=_statement("UPDATE runs SET status = ?1 WHERE run_id = ?3 AND status IS NOT ?1"),
    insert_record=_statement("INSERT INTO records (run_id, seq, blob) VALUES (?, ?, ?)"),
    insert_snapshot=_statement("INSERT INTO snapshots (run_id, seq, blob) VALUES (?, ?, ?)"),
    last_record=_statement("SELECT max(seq) FROM records WHERE run_id = ?"),
    record_at=_statement("SELECT blob FROM records WHERE run_id = ? AND seq = ?"),
    nearest_snapshot=_statement(
        "SELECT seq, blob FROM snapshots WHERE run_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
    ),
    records_after=_statement(
        "SELECT blob FROM records WHERE run_id = ? AND seq > ? AND seq <= ? ORDER BY seq"
    ),
    records_from=_statement(
        "SELECT seq, blob FROM records WHERE run_id = ? AND seq >= ? AND seq < ? "
        "ORDER BY seq LIMIT ?"
    ),
    list_all=_statement(
        f"SELECT {_META_COLUMNS}, {_KEYED_LAST} FROM runs WHERE seq >= 0 "
        "ORDER BY updated_at DESC, run_id LIMIT ? OFFSET ?"
    ),
    list_status=_statement(
        f"SELECT {_META_COLUMNS}, {_KEYED_LAST} FROM runs WHERE seq >= 0 AND status = ? "
        "ORDER BY updated_at DESC, run_id LIMIT ? OFFSET ?"
    ),
)

# Version 3: a run's rows are keyed from ``num << 32`` (``_BASE`` finds it by run_id,
# through the unique index, which holds the rowid: the runs table itself is not read).
_BASE: Final = "(SELECT num << 32 FROM runs WHERE run_id = ?1)"
_LISTED: Final = "CAST(? / 60 AS INTEGER)"  # updated_at in whole minutes
_ORDER: Final = "ORDER BY listed DESC, updated_at DESC, run_id"
_LAST_KEY: Final = (
    "(SELECT key FROM records WHERE key >= num << 32 AND key < (num + 1) << 32 "
    "ORDER BY key DESC LIMIT 1) - (num << 32)"
)
_NUMBERED: Final = Statements(
    read_meta=_statement(
        f"SELECT {_META_COLUMNS}, {_LAST_KEY} FROM runs WHERE run_id = ? AND seq >= 0"
    ),
    move_head=_MOVE_HEAD,
    move_status=_statement(
        f"UPDATE runs SET status = ?, listed = {_LISTED} "
        f"WHERE run_id = ? AND (status IS NOT ? OR listed IS NOT {_LISTED})"
    ),
    insert_record=_statement(f"INSERT INTO records (key, blob) VALUES ({_BASE} + ?2, ?3)"),
    insert_snapshot=_statement(f"INSERT INTO snapshots (key, blob) VALUES ({_BASE} + ?2, ?3)"),
    last_record=_statement(f"SELECT {_LAST_KEY} FROM runs WHERE run_id = ?"),
    record_at=_statement(f"SELECT blob FROM records WHERE key = {_BASE} + ?2"),
    nearest_snapshot=_statement(
        f"SELECT key - {_BASE}, blob FROM snapshots "
        f"WHERE key >= {_BASE} AND key <= {_BASE} + ?2 ORDER BY key DESC LIMIT 1"
    ),
    records_after=_statement(
        f"SELECT blob FROM records WHERE key > {_BASE} + ?2 AND key <= {_BASE} + ?3 ORDER BY key"
    ),
    records_from=_statement(
        f"SELECT key - {_BASE}, blob FROM records "
        f"WHERE key >= {_BASE} + ?2 AND key < {_BASE} + ?3 ORDER BY key LIMIT ?4"
    ),
    list_all=_statement(
        f"SELECT {_META_COLUMNS}, {_LAST_KEY} FROM runs WHERE seq >= 0 {_ORDER} LIMIT ? OFFSET ?"
    ),
    list_status=_statement(
        f"SELECT {_META_COLUMNS}, {_LAST_KEY} FROM runs WHERE seq >= 0 AND status = ? "
        f"{_ORDER} LIMIT ? OFFSET ?"
    ),
)

_STATEMENTS: Final = {1: _KEYED, 2: _KEYED, SCHEMA_VERSION: _NUMBERED}


def check_layout(conn: sqlite3.Connection, path: Path, *, create: bool = True) -> Statements | None:
    """Create the layout in an empty file, or check that the file holds one we read.

    Runs in its own ``BEGIN IMMEDIATE`` transaction, so two processes opening a new file
    at once create the tables once (a plain ``BEGIN`` when ``create`` is false). With
    ``create``, a file of any version known gets the ``definitions``, inbox and ``streams``
    tables if it lacks them.

    Returns:
        The statements of the file's layout (``None`` only for an empty file not created).

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
                return None
            for statement in _SCHEMA:
                conn.execute(statement)
            version = SCHEMA_VERSION
        elif app_id != _APPLICATION_ID:
            raise foreign_file_error(path, f"its application id is {app_id:#x}")
        elif version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store {str(path)!r} has schema version {version}, newer "
                f"than this phasegraph reads ({SCHEMA_VERSION}); upgrade phasegraph"
            )
        elif version not in _STATEMENTS:
            raise foreign_file_error(path, f"its schema version {version} is unknown")
        if create:
            _added_tables(conn)  # a new file's, or one an older version wrote
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return _STATEMENTS[version]


def _added_tables(conn: sqlite3.Connection) -> None:
    """Create the tables a file of any version gets when it is opened to write."""
    for statement in (DEFINITIONS_TABLE, *INBOX_TABLES, *STREAMS_TABLE):
        conn.execute(statement)


def connect_read_only(path: Path, timeout: float) -> tuple[sqlite3.Connection, Statements]:
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
    if found is not None:
        return conn, found
    conn.close()
    return _empty_store(path)


def _empty_store(path: Path) -> tuple[sqlite3.Connection, Statements]:
    """An in-memory store with the layout and no runs: what a missing file reads as."""
    conn = _connect(":memory:", 0)
    check_layout(conn, path)
    return conn, _NUMBERED


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
