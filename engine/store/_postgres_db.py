"""The Postgres store's connections: the one owner of ``psycopg`` and ``psycopg_pool``.

Three kinds of connection, each for one job:

* **the pool** (:class:`Database`): an ``AsyncConnectionPool`` the store's statements
  and the work queue's share. Every statement runs in autocommit mode, one statement one
  transaction, without server-side prepared statements (``prepare_threshold=None``), so
  the store works behind a transaction-mode pooler (PgBouncer) as well as directly. A
  pooled connection is checked for a dead socket (a restarted server closed it) before
  it is handed out, at the cost of a ``poll``, not a round trip;
* **a blocking connection** (:meth:`Database.blocking`) for the lease keeper's thread, so
  renewals never wait for the event loop or behind commits;
* **a listening connection** (:class:`Listener`) per worker, which waits for new
  work: ``NOTIFY`` needs a session of its own (it does not survive a transaction-mode
  pooler, where the worker falls back to polling).

The schema is created or migrated on first use (:meth:`Database.migrate`), under a
transaction-scoped advisory lock, so concurrent first users wait for one another.

Every driver error leaves here as the store's: :class:`StoreUnavailableError` for what
passes (the server cannot be reached or restarts, a statement timeout, a full disk, a
lock or serialization conflict: the caller may retry), :class:`DuplicateKey` for a
unique violation, :class:`StoreError` for the rest. Messages name the server by its URL
with the password masked, and never quote the password.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

import psycopg
import psycopg.errors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from phasegraph.errors import StoreError, StoreUnavailableError
from phasegraph.store._postgres_schema import SCHEMA_VERSION, migration_lock, migrations

__all__ = ["Blocking", "Database", "DuplicateKey", "Listener", "PostgresOptions", "Row"]

Row = tuple[Any, ...]
_CONNECT_TIMEOUT: Final = 5  # seconds (libpq's connect_timeout; whole seconds)
_POOL_WAIT: Final = 5.0  # seconds a statement waits for a pooled connection
_UNDEFINED: Final = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresOptions:
    """How to reach the database (``open_store`` checked the URL already).

    Attributes:
        conninfo: The libpq connection string or URL (may hold a password).
        where: The URL as messages show it (password masked).
        password: The password, if the URL has one (scrubbed from any driver message).
        schema: The Postgres schema the tables live in.
        pool_size: Connections the pool keeps at most.
    """

    conninfo: str
    where: str
    password: str | None
    schema: str
    pool_size: int


class DuplicateKey(StoreError):
    """A statement would have written a row whose key exists (a unique violation)."""


@final
class Database:
    """The store's pool, opened (and the schema made current) on first use.

    Args:
        options: Where the database is, and the pool's size.
    """

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self._pool: AsyncConnectionPool | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    @property
    def where(self) -> str:
        """The database, as messages name it."""
        return self.options.where

    async def one(self, sql: bytes, params: Sequence[Any] = ()) -> Row | None:
        """The first row of a statement, or ``None``."""
        pool = self._pool or await self._open()
        try:
            conn = await pool.getconn(_POOL_WAIT)
            try:
                cursor = await conn.execute(sql, params, binary=True)
                return await cursor.fetchone()
            finally:
                await pool.putconn(conn)
        except psycopg.Error as exc:
            raise await self._translated(exc) from None

    async def all(self, sql: bytes, params: Sequence[Any] = ()) -> list[Row]:
        """Every row of a statement."""
        pool = self._pool or await self._open()
        try:
            conn = await pool.getconn(_POOL_WAIT)
            try:
                cursor = await conn.execute(sql, params, binary=True)
                return await cursor.fetchall()
            finally:
                await pool.putconn(conn)
        except psycopg.Error as exc:
            raise await self._translated(exc) from None

    async def run(self, sql: bytes, params: Sequence[Any] = ()) -> int:
        """Execute a statement; how many rows it changed."""
        pool = self._pool or await self._open()
        try:
            conn = await pool.getconn(_POOL_WAIT)
            try:
                cursor = await conn.execute(sql, params, binary=True)
                return cursor.rowcount
            finally:
                await pool.putconn(conn)
        except psycopg.Error as exc:
            raise await self._translated(exc) from None

    async def migrate(self) -> tuple[int, int]:
        """Create or migrate the schema now; the version found and the version left.

        Raises:
            StoreError: The schema was written by a newer phasegraph.
            StoreUnavailableError: The database cannot be reached.
        """
        try:
            conn = await self._connect()
            try:
                return await _migrate(conn, self.options.schema, self.where)
            finally:
                await conn.close()
        except psycopg.Error as exc:
            raise await self._translated(exc) from None

    def blocking(self) -> Blocking:
        """A blocking connection of its own, for a thread that is not the event loop's."""
        return Blocking(self)

    def listener(self, channel: str) -> Listener:
        """A connection of its own that waits for ``NOTIFY`` on ``channel``."""
        return Listener(self, channel)

    async def aclose(self) -> None:
        """Close the pool. Safe to call more than once."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.shield(pool.close())

    # -- connecting ---------------------------------------------------------------------

    async def _open(self) -> AsyncConnectionPool:
        """The pool, opened now if it is not (after the schema is made current)."""
        async with self._opening:
            if self._pool is not None:
                return self._pool
            if self._closed:
                raise StoreUnavailableError(f"the Postgres store {self.where} is closed")
            await self.migrate()  # also proves the database answers, with a clear error
            pool = AsyncConnectionPool(
                self.options.conninfo,
                kwargs=_SESSION,
                min_size=1,
                max_size=self.options.pool_size,
                open=False,
                check=_alive,
                name="phasegraph",
                timeout=_POOL_WAIT,
            )
            try:
                await pool.open(wait=False)
            except psycopg.Error as exc:
                raise await self._translated(exc) from None
            self._pool = pool
            return pool

    async def _connect(self) -> psycopg.AsyncConnection[Row]:
        return await psycopg.AsyncConnection.connect(
            self.options.conninfo, connect_timeout=_CONNECT_TIMEOUT, **_SESSION
        )

    async def _translated(self, exc: psycopg.Error) -> StoreError:
        """The store's error for a driver's; a pool timeout is told why, if a connect says."""
        if isinstance(exc, PoolTimeout) and not self._closed:
            try:
                await (await self._connect()).close()
            except psycopg.Error as probe:
                exc = probe  # the reason no connection could be had
        return translated(exc, self.options)


_SESSION: Final[dict[str, Any]] = {"autocommit": True, "prepare_threshold": None}


async def _alive(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raise if an idle pooled connection's socket has something to say: the server left.

    An idle connection outside ``LISTEN`` receives nothing unless the server closed it
    (a restart, ``pg_terminate_backend``): then the socket is readable (the error and
    the end of the stream). The pool drops such a connection and hands out another.
    """
    if conn.closed or select.select([conn.pgconn.socket], [], [], 0)[0]:
        await conn.close()  # closed, so the pool drops it rather than keeping it
        raise psycopg.OperationalError("the server closed the connection")


async def _migrate(conn: psycopg.AsyncConnection[Row], schema: str, where: str) -> tuple[int, int]:
    """Bring ``schema`` to :data:`SCHEMA_VERSION` in one transaction, under an advisory lock."""
    async with conn.transaction():
        await conn.execute(b"SELECT pg_advisory_xact_lock(%s)", (migration_lock(schema),))
        found = await _version(conn, schema)
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the Postgres store {where} (schema {schema!r}) has layout version {found}, "
                f"written by a newer phasegraph; this one knows versions up to "
                f"{SCHEMA_VERSION}: upgrade phasegraph"
            )
        for statement in migrations(schema, found):
            await conn.execute(statement)
    return found, max(found, SCHEMA_VERSION)


async def _version(conn: psycopg.AsyncConnection[Row], schema: str) -> int:
    """The schema's layout version (0: it has no phasegraph tables yet)."""
    cursor = await conn.execute(
        b"SELECT to_regclass(format('%%I.schema_version', %s::text)) IS NOT NULL", (schema,)
    )
    row = await cursor.fetchone()
    if row is None or not row[0]:
        return 0
    cursor = await conn.execute(f'SELECT version FROM "{schema}".schema_version'.encode())
    found = await cursor.fetchone()
    return 0 if found is None else int(found[0])


def translated(exc: psycopg.Error, options: PostgresOptions) -> StoreError:
    """The store's error for a driver error (see the module doc)."""
    where, why = options.where, _said(exc, options.password)
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return DuplicateKey(f"Postgres at {where} refused a duplicate row: {why}")
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.InsufficientResources):
        return StoreUnavailableError(f"Postgres at {where} is out of resources: {why}")
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return StoreUnavailableError(f"Postgres at {where} cancelled a statement: {why}")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        # Connections refused or lost, a restart (admin shutdown, cannot connect now),
        # serialization and lock conflicts, read-only after a failover: all pass.
        return StoreUnavailableError(f"cannot reach Postgres at {where}: {why}")
    if isinstance(exc, _UNDEFINED):
        return StoreError(
            f"the Postgres store {where} lost its tables (schema {options.schema!r}): {why}; "
            f"restore it, or create them with 'phasegraph store migrate'"
        )
    return StoreError(f"Postgres at {where} refused: {why}")


def _said(exc: BaseException, password: str | None) -> str:
    """The driver's message on one line, without the password."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text


@final
class Blocking:
    """A blocking connection for one thread, connected on first use and again after a failure.

    Args:
        database: Whose database and options.
    """

    def __init__(self, database: Database) -> None:
        self._options = database.options
        self._conn: psycopg.Connection[Row] | None = None

    def all(self, sql: bytes, params: Sequence[Any] = ()) -> list[Row]:
        """Every row of a statement (blocks the calling thread).

        Raises:
            StoreUnavailableError: The database did not answer (the next call reconnects).
            StoreError: It refused the statement.
        """
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.Connection.connect(
                    self._options.conninfo, connect_timeout=_CONNECT_TIMEOUT, **_SESSION
                )
            return self._conn.execute(sql, params, binary=True).fetchall()
        except psycopg.Error as exc:
            self.close()
            raise translated(exc, self._options) from None

    def close(self) -> None:
        """Close the connection (a new one is made by the next call)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


@final
class Listener:
    """A connection of its own that listens on one channel; reconnects when lost.

    Args:
        database: Whose database.
        channel: The notification channel.
    """

    def __init__(self, database: Database, channel: str) -> None:
        self._options = database.options
        self._channel = channel
        self._conn: psycopg.AsyncConnection[Row] | None = None

    async def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification; whether one came.

        A connection that cannot be had (or is lost) makes this a plain wait: the caller
        polls, which is the fallback anyway.

        Raises:
            StoreUnavailableError: The database cannot be reached (after the wait).
        """
        try:
            conn = await self._listening()
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                return True
            return False
        except psycopg.Error as exc:
            await self.aclose()
            await asyncio.sleep(seconds)
            raise translated(exc, self._options) from None

    async def _listening(self) -> psycopg.AsyncConnection[Row]:
        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._options.conninfo, connect_timeout=_CONNECT_TIMEOUT, **_SESSION
            )
            await conn.execute(f'LISTEN "{self._channel}"'.encode())
            self._conn = conn
        return self._conn

    async def aclose(self) -> None:
        """Close the connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
