"""The embedded store: one SQLite file in WAL mode, on the stdlib ``sqlite3`` driver.

Commits go through a group commit (:mod:`phasegraph.store._group_commit`): the commits
of concurrent runs queued in one event-loop turn share one ``BEGIN IMMEDIATE … COMMIT``,
written on the event-loop thread when SQLite grants the write lock at once (no thread
hop), else on the worker thread, which waits for it. A run read (``read``) is made on the
event-loop thread too when the connection is free and no lock is in the way. Other
reads, leases, and commits and run reads that must wait are one hop each to a dedicated
worker thread
(:class:`~phasegraph.store._thread_worker.ThreadWorker`), one transaction each. One
connection serves both threads, one at a time (a lock). With ``synchronous=full`` the
fsync of a commit written at once blocks the event loop for its duration; that is the
price of a commit durable on return without a hop.

Lease checks use ``time.time()`` of the calling machine, which every process sharing the
file agrees on. Each statement is prepared once per connection (the driver keeps them in
its cache).

Layout (:mod:`phasegraph.store._sqlite_layout`; schema version :data:`SCHEMA_VERSION`,
kept in ``PRAGMA user_version``; the file is marked as phasegraph's with
``PRAGMA application_id``):

* ``runs``: one row per run id — metadata, head seq (-1 before the first commit) and
  the lease (owner, last token issued, expiry); one index, by update time, for listing;
* ``records``: one row per step, its record;
* ``snapshots``: one row per snapshotted step, its snapshot;
* ``definitions``: one row per run definition, its bytes under their digest (shared by
  runs, deleted by none; added to a file of an older layout when it is opened to write).

Every read (a run read, or the head a history read starts from) takes the head from
``runs`` with the seq of the run's last record in one statement, and refuses the run if
they differ (:class:`~phasegraph.errors.JournalHeadError`).

A commit changes two pages (the run's ``runs`` leaf and a ``records`` leaf) in the
current layout, three in older files; each page it changes is a whole frame the WAL
must write.

A call whose awaiting task is cancelled still finishes its transaction; commits are
idempotent, so retrying such a commit is safe.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, final

from phasegraph.errors import (
    InputError,
    JournalHeadError,
    LeaseLostError,
    PhasegraphError,
    StoreError,
    StoreUnavailableError,
)
from phasegraph.store._group_commit import GroupCommit, Outcomes
from phasegraph.store._holder import holder_gone
from phasegraph.store._meta import listed_meta, stored_meta
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
from phasegraph.store._sqlite_layout import (
    MAX_SEQ,
    Statements,
    check_layout,
    connect_read_only,
    foreign_file_error,
)
from phasegraph.store._thread_worker import ThreadWorker
from phasegraph.store.base import Commit, Lease, LeaseLine, Message, RunMeta, Store, StoredRun

__all__ = [
    "SqliteStore",
]

T = TypeVar("T")

_BUSY_TIMEOUT: Final = 5.0  # seconds to wait for another process's write lock
_WAIT: Final = f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}"
_NO_WAIT: Final = "PRAGMA busy_timeout = 0"  # the connection's setting between calls
_LOCKED: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_HISTORY_BATCH: Final = 256  # rows in the first history batch ...
_HISTORY_BATCH_MAX: Final = 4096  # ... growing 4x per batch up to this many


@final
class SqliteStore(Store):
    """A store in one SQLite database file.

    Args:
        path: The database file (relative to the current directory); missing parent
            directories are created on first use.
        synchronous: ``"normal"`` (default; durable across process crashes, the last
            commits may be lost on power failure) or ``"full"`` (fsync every commit).
        read_only: Never write the file or its folder (works where they are read-only);
            writing calls are refused, and a file not there yet reads as an empty store.
    """

    def __init__(self, path: Path, *, synchronous: str = "normal", read_only: bool = False) -> None:
        if synchronous not in ("normal", "full"):
            raise InputError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self._path = path.absolute()  # fixed now, whatever the cwd is at first use
        self._synchronous = synchronous
        self._read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._sql: Statements | None = None  # the statements of the file's layout
        self._lock = threading.Lock()  # held by whichever thread is using _conn
        self._worker = ThreadWorker("phasegraph-sqlite")
        self._group: GroupCommit[tuple[Lease, Commit]] = GroupCommit(
            self._worker, self._commit_now, self._commit_waiting
        )
        self._closed = False
        # Runs whose lease this store took and has not released: with one, a commit is
        # written at once; with more, commits wait a turn to share a transaction.
        self._writers: set[str] = set()

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only (it writes nothing, and refuses writes)."""
        return self._read_only

    @property
    def path(self) -> Path:
        """The database file (absolute)."""
        return self._path

    async def acquire(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Take the run's lease; see :meth:`Store.acquire`."""
        check_ttl(ttl)
        lease = await self._call(self._acquire, run_id, owner, ttl)
        self._writers.add(run_id)
        return lease

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease we hold; see :meth:`Store.renew`."""
        check_ttl(ttl)
        return await self._call(self._renew, lease, ttl)

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours; see :meth:`Store.release`."""
        self._writers.discard(lease.run_id)
        await self._call(self._release, lease)

    async def holder(self, run_id: str) -> str | None:
        """The owner of the run's live lease; see :meth:`Store.holder`."""
        return await self._call(self._holder, run_id, write=False)

    def lease_line(self) -> LeaseLine:
        """Renewals in a transaction of their own on this store's connection.

        Made from the keeper's thread under the connection's lock, as the worker thread
        makes its calls: they wait only for a transaction in progress, never for the
        event loop.
        """
        return _SqliteLine(self)

    async def commit(self, lease: Lease, commit: Commit) -> None:
        """Write one step, in a transaction it may share with concurrent runs' commits.

        See :meth:`Store.commit`; a refused commit is refused alone.
        """
        check_commit(lease, commit)
        if commit.seq > MAX_SEQ:  # a record's key holds the seq in 32 bits
            raise StoreError(
                f"run {lease.run_id!r} reached seq {commit.seq}: an SQLite store keeps at "
                f"most {MAX_SEQ + 1} steps of a run",
                run_id=lease.run_id,
                seq=commit.seq,
            )
        if self._closed:
            raise self._closed_error()
        if self._read_only:
            raise self._read_only_error()
        await self._group.submit((lease, commit), alone=len(self._writers) <= 1)

    async def read(self, run_id: str, seq: int | None = None) -> StoredRun:
        """Read a run at ``seq`` (default: head); see :meth:`Store.read`.

        Read on this thread when that needs no waiting (see :meth:`_read_now`), else on
        the worker thread, which waits for a lock if another process holds one.
        """
        if self._closed:
            raise self._closed_error()
        done = self._read_now(run_id, seq)
        if done is not None:
            return done
        return await self._call(self._read, run_id, seq, write=False)

    async def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(seq, record)`` for ``start <= seq < stop``; see :meth:`Store.history`.

        Rows come in batches of one worker hop each, growing from
        :data:`_HISTORY_BATCH` to :data:`_HISTORY_BATCH_MAX` rows: a short window costs
        one small read, and a long history few hops.
        """
        head = await self._call(self._head, run_id, write=False)
        end = head + 1 if stop is None else min(stop, head + 1)
        seq = max(start, 0)
        batch = _HISTORY_BATCH
        while seq < end:
            rows = await self._call(self._records, run_id, seq, end, batch, write=False)
            if not rows:
                break  # records end early: never spin
            for row in rows:
                yield row
            seq += len(rows)
            batch = min(batch * 4, _HISTORY_BATCH_MAX)

    async def history_list(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Every ``(seq, record)`` of :meth:`history` in one list: one query, one worker hop."""
        return await self._call(self._history, run_id, start, stop, write=False)

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """List runs, most recently updated first; see :meth:`Store.list_runs`."""
        check_page(limit, offset)
        return await self._call(self._list, status, limit, offset, write=False)

    async def put_definition(self, key: str, body: bytes) -> None:
        """Keep a definition's bytes once; see :meth:`Store.put_definition`.

        One transaction of its own on the worker thread: a definition is written once
        per distinct content, so it needs no share of the group commit.
        """
        await self._call(self._put_definition, key, body)

    async def get_definition(self, key: str) -> bytes | None:
        """The definition kept under ``key``; see :meth:`Store.get_definition`."""
        return await self._call(self._get_definition, key, write=False)

    async def has_definition(self, key: str) -> bool:
        """Whether a definition is kept under ``key`` (its key's index entry alone is read)."""
        return await self._call(self._has_definition, key, write=False)

    async def post_message(
        self, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        """Put a message in the run's inbox once; see :meth:`Store.post_message`.

        One transaction of its own (IMMEDIATE: two posts of one id are serialized).
        """
        return await self._call(self._post_message, run_id, message_id, body, at)

    async def messages(
        self, run_id: str, *, after: int | None = None, limit: int = 100
    ) -> list[Message]:
        """The run's messages past ``after``; see :meth:`Store.messages`."""
        return await self._call(self._messages, run_id, after, limit, write=False)

    async def take_messages(self, run_id: str, position: int) -> None:
        """Move the run's inbox cursor on; see :meth:`Store.take_messages`."""
        await self._call(self._take_messages, run_id, position)

    async def append_stream(self, run_id: str, batch: bytes) -> None:
        """Append live events; see :meth:`Store.append_stream` (a row each batch)."""
        await self._call(self._append_stream, run_id, batch)

    async def read_stream(self, run_id: str) -> list[bytes]:
        """The live-event batches; see :meth:`Store.read_stream`."""
        return await self._call(self._read_stream, run_id, write=False)

    async def drop_stream(self, run_id: str) -> None:
        """Forget the live-event batches; see :meth:`Store.drop_stream`."""
        await self._call(self._drop_stream, run_id)

    async def aclose(self) -> None:
        """Close the connection and stop the worker thread. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        await self._group.idle()  # commits already accepted are written first
        if not self._worker.started:
            return
        try:
            await self._worker.call(self._close_conn)
        finally:
            self._worker.stop()

    # ------------------------------------------------------------- event-loop side

    async def _call(self, fn: Callable[..., T], *args: object, write: bool = True) -> T:
        """Run ``fn(conn, *args)`` in one transaction on the worker thread.

        Writers begin IMMEDIATE so another process's writer makes them wait at BEGIN
        (up to the busy timeout) instead of failing halfway; readers begin DEFERRED.
        """
        if self._closed:
            raise self._closed_error()
        if write and self._read_only:
            raise self._read_only_error()
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        return await self._worker.call(self._in_transaction, begin, fn, args)

    def _read_only_error(self) -> StoreError:
        return StoreError(f"the SQLite store {str(self._path)!r} was opened read-only")

    def _closed_error(self) -> StoreUnavailableError:
        return StoreUnavailableError(f"the SQLite store {str(self._path)!r} is closed")

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        if isinstance(exc, _JournalAhead):
            return exc.error  # rolled back: refused, not a failure of the store
        return StoreUnavailableError(f"SQLite store {str(self._path)!r} failed: {exc}")

    # ------------------------------------------------------------- commits

    def _commit_now(self, items: Sequence[tuple[Lease, Commit]]) -> Outcomes | None:
        """Write a batch on this thread if that needs no waiting, else return ``None``."""
        conn = self._conn
        if conn is None or not self._lock.acquire(blocking=False):
            return None  # not connected yet, or the worker is using the connection
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")  # busy_timeout is 0: never waits
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode in _LOCKED:
                    return None  # another process is writing: the worker will wait
                raise self._failed(exc) from exc
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
            return self._write_begun(conn, items)
        finally:
            self._lock.release()

    def _read_now(self, run_id: str, seq: int | None) -> StoredRun | None:
        """Read on the event-loop thread if that needs no waiting, else return ``None``.

        A read is three statements of indexed lookups (the meta and the seq of the last
        record, the nearest snapshot, the records after it), shorter than the hop to the
        worker and back (measured: 25-40 µs for a head read of the loop benchmark, the
        hop 60-90 µs more), so it is made at once when the connection is free; as for a
        commit written at once, the loop waits for it. The connection's busy timeout is
        0 between calls: a read that would wait for a lock (rare in WAL mode) is left to
        the worker, which waits.
        """
        conn = self._conn
        if conn is None or not self._lock.acquire(blocking=False):
            return None  # not connected yet, or the worker is using the connection
        try:
            try:
                conn.execute("BEGIN")
                try:
                    stored = self._read(conn, run_id, seq)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode in _LOCKED:
                    return None  # a lock held elsewhere: the worker will wait for it
                raise self._failed(exc) from exc
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
            return stored
        finally:
            self._lock.release()

    def _commit_waiting(self, items: Sequence[tuple[Lease, Commit]]) -> Outcomes:
        """Write a batch, waiting for the write lock (on the worker thread)."""
        return self._in_transaction("BEGIN IMMEDIATE", self._write_batch, (items,))

    def _write_begun(
        self, conn: sqlite3.Connection, items: Sequence[tuple[Lease, Commit]]
    ) -> Outcomes:
        """Write a batch in the transaction just begun, and end it."""
        try:
            outcomes = self._write_batch(conn, items)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._failed(exc) from exc
            raise
        return outcomes

    # ------------------------------------------------------------- worker-thread side

    def _in_transaction(self, begin: str, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._connect()
                conn.execute(_WAIT)
                try:
                    conn.execute(begin)
                    try:
                        result = fn(conn, *args)
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
                finally:
                    conn.execute(_NO_WAIT)
                return result
            except PhasegraphError:
                raise
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    def _connect(self) -> sqlite3.Connection:
        if self._read_only:
            try:
                self._conn, self._sql = connect_read_only(self._path, _BUSY_TIMEOUT)
            except sqlite3.OperationalError as exc:
                raise StoreUnavailableError(
                    f"cannot read SQLite store {str(self._path)!r}: {exc}"
                ) from exc
            except sqlite3.DatabaseError as exc:
                why = f"it is not an SQLite database ({exc})"
                raise foreign_file_error(self._path, why) from exc
            return self._conn
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self._path,
                timeout=_BUSY_TIMEOUT,
                isolation_level=None,
                check_same_thread=False,  # the event-loop thread writes batches too
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailableError(
                f"cannot open SQLite store {str(self._path)!r}: {exc}"
            ) from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            statements = check_layout(conn, self._path)
        except sqlite3.OperationalError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            why = f"it is not an SQLite database ({exc})"
            raise foreign_file_error(self._path, why) from exc
        except BaseException:
            conn.close()
            raise
        self._conn, self._sql = conn, statements
        return conn

    def _close_conn(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @staticmethod
    def _acquire(conn: sqlite3.Connection, run_id: str, owner: str, ttl: float) -> Lease:
        now = time.time()
        row = conn.execute(
            "SELECT lease_owner, lease_token, lease_expires FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        # A live lease is refused unless its holder provably died: checked inside this
        # write transaction, so the takeover happens only if that holder is still recorded.
        if row is not None and row[0] is not None and row[2] > now and not holder_gone(row[0]):
            raise lease_held_error(run_id, row[0], row[2])
        token = (row[1] if row is not None else 0) + 1
        conn.execute(
            "INSERT INTO runs (run_id, lease_owner, lease_token, lease_expires) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
            "lease_owner = excluded.lease_owner, lease_token = excluded.lease_token, "
            "lease_expires = excluded.lease_expires",
            (run_id, owner, token, now + ttl),
        )
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + ttl, ttl=ttl)

    @staticmethod
    def _renew(conn: sqlite3.Connection, lease: Lease, ttl: float) -> Lease:
        expires_at = time.time() + ttl
        # An expired lease nobody took over is still ours: the token is what fences.
        updated = conn.execute(
            "UPDATE runs SET lease_expires = ? "
            "WHERE run_id = ? AND lease_token = ? AND lease_owner IS NOT NULL",
            (expires_at, lease.run_id, lease.token),
        ).rowcount
        if not updated:
            raise lease_lost_error(lease, _live_holder(conn, lease.run_id))
        return Lease(
            run_id=lease.run_id,
            owner=lease.owner,
            token=lease.token,
            expires_at=expires_at,
            ttl=ttl,
        )

    @staticmethod
    def _renew_many(
        conn: sqlite3.Connection, leases: Sequence[Lease]
    ) -> list[Lease | LeaseLostError]:
        outcomes: list[Lease | LeaseLostError] = []
        for lease in leases:
            try:
                outcomes.append(SqliteStore._renew(conn, lease, lease.ttl))
            except LeaseLostError as exc:
                outcomes.append(exc)
        return outcomes

    @staticmethod
    def _holder(conn: sqlite3.Connection, run_id: str) -> str | None:
        return _live_holder(conn, run_id)

    @staticmethod
    def _release(conn: sqlite3.Connection, lease: Lease) -> None:
        conn.execute(
            "UPDATE runs SET lease_owner = NULL WHERE run_id = ? AND lease_token = ?",
            (lease.run_id, lease.token),
        )

    @staticmethod
    def _post_message(
        conn: sqlite3.Connection, run_id: str, message_id: str, body: bytes, at: float
    ) -> tuple[Message, bool]:
        row = conn.execute(
            "SELECT position, body, at FROM messages WHERE run_id = ? AND id = ?",
            (run_id, message_id),
        ).fetchone()
        if row is not None:
            return Message(
                run_id=run_id, position=row[0], id=message_id, body=bytes(row[1]), at=row[2]
            ), False
        (last,) = conn.execute(
            "SELECT coalesce(max(position), 0) FROM messages WHERE run_id = ?", (run_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO messages (run_id, position, id, body, at) VALUES (?, ?, ?, ?, ?)",
            (run_id, last + 1, message_id, body, at),
        )
        return Message(run_id=run_id, position=last + 1, id=message_id, body=body, at=at), True

    @staticmethod
    def _messages(
        conn: sqlite3.Connection, run_id: str, after: int | None, limit: int
    ) -> list[Message]:
        try:
            if after is None:
                row = conn.execute(
                    "SELECT position FROM messages_taken WHERE run_id = ?", (run_id,)
                ).fetchone()
                after = 0 if row is None else row[0]
            rows = conn.execute(
                "SELECT position, id, body, at FROM messages WHERE run_id = ? AND position > ? "
                "ORDER BY position LIMIT ?",
                (run_id, after, max(limit, 0)),
            ).fetchall()
        except sqlite3.OperationalError:
            found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
            if conn.execute(found).fetchone() is not None:
                raise
            return []  # a file only read since an older phasegraph wrote it: no inbox
        return [
            Message(run_id=run_id, position=p, id=i, body=bytes(b), at=a) for p, i, b, a in rows
        ]

    @staticmethod
    def _take_messages(conn: sqlite3.Connection, run_id: str, position: int) -> None:
        conn.execute(
            "INSERT INTO messages_taken (run_id, position) SELECT ?, min(?, coalesce(max("
            "position), 0)) FROM messages WHERE run_id = ? ON CONFLICT (run_id) DO UPDATE "
            "SET position = max(position, excluded.position)",
            (run_id, position, run_id),
        )

    @staticmethod
    def _put_definition(conn: sqlite3.Connection, key: str, body: bytes) -> None:
        conn.execute("INSERT OR IGNORE INTO definitions (key, body) VALUES (?, ?)", (key, body))

    @staticmethod
    def _get_definition(conn: sqlite3.Connection, key: str) -> bytes | None:
        row = _definition_row(conn, "SELECT body FROM definitions WHERE key = ?", key)
        return None if row is None else bytes(row[0])

    @staticmethod
    def _has_definition(conn: sqlite3.Connection, key: str) -> bool:
        return _definition_row(conn, "SELECT 1 FROM definitions WHERE key = ?", key) is not None

    @staticmethod
    def _append_stream(conn: sqlite3.Connection, run_id: str, batch: bytes) -> None:
        conn.execute("INSERT INTO streams (run_id, batch) VALUES (?, ?)", (run_id, batch))

    @staticmethod
    def _read_stream(conn: sqlite3.Connection, run_id: str) -> list[bytes]:
        sql = "SELECT batch FROM streams WHERE run_id = ? ORDER BY id"
        try:
            rows = conn.execute(sql, (run_id,)).fetchall()
        except sqlite3.OperationalError:
            # A file an older phasegraph last wrote, read read-only: it streams nothing.
            found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'streams'"
            if conn.execute(found).fetchone() is not None:
                raise
            return []
        return [bytes(row[0]) for row in rows]

    @staticmethod
    def _drop_stream(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("DELETE FROM streams WHERE run_id = ?", (run_id,))

    def _statements(self) -> Statements:
        """The statements of the connected file's layout (called with a connection)."""
        if self._sql is None:
            raise StoreUnavailableError(f"the SQLite store {str(self._path)!r} is not connected")
        return self._sql

    def _write_batch(
        self, conn: sqlite3.Connection, items: Sequence[tuple[Lease, Commit]]
    ) -> Outcomes:
        return _write_batch(conn, self._statements(), items)

    @staticmethod
    def _commit(conn: sqlite3.Connection, sql: Statements, lease: Lease, commit: Commit) -> None:
        # One statement checks the lease and the head and moves the head: the common
        # case costs two UPDATEs (the second changes nothing unless the status or the
        # listing's minute moved) and an INSERT. Only a refused commit looks closer.
        # The token fences: a lease that expired while nobody took the run is taken again.
        # The three statements every step makes are executed here rather than through
        # Statement.run, one Python call fewer each.
        meta, move, status, insert = commit.meta, sql.move_head, sql.move_status, sql.insert_record
        moved = conn.execute(
            move.sql,
            move.bind(
                (
                    meta.graph,
                    commit.seq,
                    meta.created_at,
                    meta.updated_at,
                    time.time() + lease.ttl,
                    lease.run_id,
                    commit.seq - 1,
                    lease.token,
                )
            ),
        )
        if not moved.rowcount:
            _refuse_commit(conn, sql, lease, commit)
            return  # the same commit again (a retry): already done
        changed = (meta.status, meta.updated_at, lease.run_id, meta.status, meta.updated_at)
        conn.execute(status.sql, status.bind(changed))
        try:
            conn.execute(insert.sql, insert.bind((lease.run_id, commit.seq, commit.record)))
        except sqlite3.IntegrityError:
            row = sql.last_record.run(conn, (lease.run_id,)).fetchone()
            last = None if row is None else row[0]
            if last is None or last < commit.seq:
                raise  # another constraint: a failure of the store
            # A record past the head: the head was moved back outside phasegraph.
            raise _JournalAhead(journal_head_error(lease.run_id, commit.seq - 1, last)) from None
        if commit.snapshot is not None:
            sql.insert_snapshot.run(conn, (lease.run_id, commit.seq, commit.snapshot))

    def _read(self, conn: sqlite3.Connection, run_id: str, seq: int | None) -> StoredRun:
        sql = self._statements()
        meta = _meta(conn, sql, run_id)
        target = meta.seq if seq is None else seq
        if not 0 <= target <= meta.seq:
            raise run_not_found_error(run_id, seq=target, head=meta.seq)
        snap = sql.nearest_snapshot.run(conn, (run_id, target)).fetchone()
        if snap is None:
            raise StoreError(
                f"run {run_id!r} has no snapshot at or below seq {target}",
                run_id=run_id,
                seq=target,
            )
        records = sql.records_after.run(conn, (run_id, snap[0], target)).fetchall()
        return StoredRun(
            meta=meta,
            seq=target,
            snapshot_seq=snap[0],
            snapshot=snap[1],
            records=tuple(blob for (blob,) in records),
        )

    def _head(self, conn: sqlite3.Connection, run_id: str) -> int:
        return _meta(conn, self._statements(), run_id).seq

    def _records(
        self, conn: sqlite3.Connection, run_id: str, start: int, stop: int, limit: int
    ) -> list[tuple[int, bytes]]:
        return self._statements().records_from.run(conn, (run_id, start, stop, limit)).fetchall()

    def _history(
        self, conn: sqlite3.Connection, run_id: str, start: int, stop: int | None
    ) -> list[tuple[int, bytes]]:
        head = self._head(conn, run_id)
        end = head + 1 if stop is None else min(stop, head + 1)
        first = max(start, 0)
        return self._records(conn, run_id, first, end, end - first) if first < end else []

    def _list(
        self, conn: sqlite3.Connection, status: str | None, limit: int, offset: int
    ) -> list[RunMeta]:
        sql = self._statements()
        if status is None:
            rows = sql.list_all.run(conn, (limit, offset)).fetchall()
        else:
            rows = sql.list_status.run(conn, (status, limit, offset)).fetchall()
        # The last column is the seq of the run's last record (NULL: it has none).
        return [
            listed_meta(row[0], tuple(row[1:6]), -1 if row[6] is None else row[6]) for row in rows
        ]


class _JournalAhead(sqlite3.IntegrityError):
    """A commit found a record stored past the head.

    Raised as an SQLite error so that its transaction (or savepoint) is rolled back,
    and reported as ``error``.
    """

    def __init__(self, error: JournalHeadError) -> None:
        super().__init__(str(error))
        self.error = error


def _write_batch(
    conn: sqlite3.Connection, sql: Statements, items: Sequence[tuple[Lease, Commit]]
) -> Outcomes:
    """Write each commit of a batch in the open transaction; one outcome per commit.

    A refusal writes nothing, so it needs no undoing. A commit that fails halfway in a
    batch of several is rolled back to its savepoint and fails alone; alone in its
    batch, its error ends the transaction.
    """
    if len(items) == 1:
        return [_commit_or_refusal(conn, sql, *items[0])]
    outcomes: Outcomes = []
    for lease, commit in items:
        conn.execute("SAVEPOINT one_commit")
        try:
            outcomes.append(_commit_or_refusal(conn, sql, lease, commit))
        except sqlite3.Error as exc:
            if not conn.in_transaction:
                raise  # SQLite ended the whole transaction: every commit fails
            conn.execute("ROLLBACK TO one_commit")
            failed = exc.error if isinstance(exc, _JournalAhead) else None
            outcomes.append(failed or StoreUnavailableError(f"SQLite commit failed: {exc}"))
        conn.execute("RELEASE one_commit")
    return outcomes


def _commit_or_refusal(
    conn: sqlite3.Connection, sql: Statements, lease: Lease, commit: Commit
) -> PhasegraphError | None:
    try:
        SqliteStore._commit(conn, sql, lease, commit)
    except PhasegraphError as exc:  # refused: meant for this commit's caller alone
        return exc
    return None


def _refuse_commit(conn: sqlite3.Connection, sql: Statements, lease: Lease, commit: Commit) -> None:
    """Say why a commit did not move the head, or return if it is a retry already stored.

    Raises:
        LeaseLostError: The lease is not the run's current, live lease.
        SequenceConflictError: The lease is fine but ``commit.seq`` is not the head + 1.
    """
    run_id = lease.run_id
    row = conn.execute(
        "SELECT seq, lease_owner, lease_token, lease_expires FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None or row[1] is None or row[2] != lease.token:
        holder = row[1] if row is not None and row[3] > time.time() else None
        raise lease_lost_error(lease, holder)
    head: int = row[0]
    if commit.seq <= head:
        stored = sql.record_at.run(conn, (run_id, commit.seq)).fetchone()
        if stored is not None and stored[0] == commit.record:
            return
    raise sequence_conflict_error(run_id, commit.seq, head)


def _definition_row(conn: sqlite3.Connection, sql: str, key: str) -> tuple[Any, ...] | None:
    """The row ``sql`` finds for ``key`` in ``definitions``; ``None`` too without the table.

    A file last opened to write by an older phasegraph, read read-only since, has no
    ``definitions`` table (a writable open adds it): it keeps no definition.
    """
    try:
        row: tuple[Any, ...] | None = conn.execute(sql, (key,)).fetchone()
    except sqlite3.OperationalError:
        found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'definitions'"
        if conn.execute(found).fetchone() is not None:
            raise  # the table is there: another failure
        return None
    return row


def _live_holder(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The owner of the run's lease if it is live now, else ``None``."""
    row = conn.execute(
        "SELECT lease_owner FROM runs WHERE run_id = ? AND lease_expires > ?",
        (run_id, time.time()),
    ).fetchone()
    return None if row is None else row[0]


def _meta(conn: sqlite3.Connection, sql: Statements, run_id: str) -> RunMeta:
    """The run's metadata, its head checked against the records: what every read starts with.

    Raises:
        RunNotFoundError: No such run.
        StoreError: The metadata is unreadable.
        JournalHeadError: The last record stored is not at the head (one more seek of
            the records' key, in the same statement).
    """
    row = sql.read_meta.run(conn, (run_id,)).fetchone()
    if row is None:
        raise run_not_found_error(run_id)
    meta = stored_meta(run_id, tuple(row[1:6]))
    last = -1 if row[6] is None else row[6]
    if last != meta.seq:
        raise journal_head_error(run_id, meta.seq, last)
    return meta


@final
class _SqliteLine(LeaseLine):
    """The SQLite store's renewals, one write transaction per batch (see ``lease_line``)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        store = self._store
        if store._closed:
            raise store._closed_error()
        return store._in_transaction("BEGIN IMMEDIATE", SqliteStore._renew_many, (leases,))
