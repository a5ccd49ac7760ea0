"""One multiplexed connection to Redis: many coroutines' commands in flight on one socket.

Redis answers the commands of one connection in the order it received them, so any
number of callers can share a socket: each queues its command and a future, and replies
resolve the futures in order. Compared with a pool of one connection per in-flight
command (redis-py's asyncio client), this saves the per-command pool, lock and timeout
bookkeeping on every step, and a thousand concurrent runs share one socket instead of
opening a thousand: their commits reach the server pipelined.

A command sent while no other is in flight is written at once (a single run's commit
costs no extra event-loop turn); commands sent while others are in flight are queued and
those of one event-loop turn sent in one write (many runs' commits share a system call).
Replies are parsed by ``hiredis``. A connection that breaks fails every command in
flight with :class:`ConnectionError`; the next command reconnects. A reply overdue by
the socket timeout aborts the connection (:class:`TimeoutError` for those in flight).

Only commands that answer at once belong here: a blocking command (BLPOP, SUBSCRIBE,
MONITOR) would stall every caller behind it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast, final

import hiredis

from phasegraph.errors import StoreError

__all__ = ["Arg", "RedisWire", "ReplyError", "WireOptions", "pack", "pack_parts"]

Arg = bytes | str | int | float

ReplyError: Final = hiredis.ReplyError
"""What an error reply (``-ERR ...``) is returned as: a value, not raised by the wire."""


@dataclass(frozen=True)
class WireOptions:
    """Where and how to connect (from the store URL).

    Attributes:
        host: Host name or address (TCP); ignored when ``path`` is set.
        port: TCP port.
        path: Unix socket path, or ``None`` for TCP.
        db: Database number to SELECT (0: none sent).
        username: ACL user name for AUTH, or ``None``.
        password: Password for AUTH, or ``None`` to send no AUTH.
        client_name: Name set with CLIENT SETNAME, or ``None``.
        connect_timeout: Seconds to wait for the connection to open.
        timeout: Seconds a reply may be overdue before the connection is dropped.
        tls: TLS context for ``rediss://`` (the certificate is checked against ``host``),
            or ``None`` for plain TCP.
    """

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    client_name: str | None = None
    connect_timeout: float = 2.0
    timeout: float = 5.0
    tls: ssl.SSLContext | None = None


# hiredis's stub types the argument as a one-item tuple; it takes any number of items.
_pack_command = cast("Callable[[tuple[Arg, ...]], bytes]", hiredis.pack_command)


def pack(args: Sequence[Arg]) -> bytes:
    """One command in the Redis protocol: an array of bulk strings (packed in C)."""
    return _pack_command(tuple(args))


def pack_parts(args: Sequence[Arg]) -> bytes:
    """``args`` as bulk strings without the array header: pieces of a command packed ahead.

    A command is its array header (``*<count>`` and CRLF), then the parts of every argument.
    """
    packed = _pack_command(tuple(args))
    return packed[packed.index(b"\r\n") + 2 :]


# Commands queued in one event-loop turn are written together, or once they add up to
# this many bytes: thousands of runs committing at once then never hold every command,
# and a joined copy of them all, in memory at the same time.
_FLUSH_BYTES: Final = 64 * 1024


@final
class _Connection(asyncio.Protocol):
    """One socket: writes coalesced per loop callback, replies matched to futures in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.broken: BaseException | None = None
        self._timeout = timeout
        self._reader = hiredis.Reader()
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._outgoing: list[bytes] = []
        self._queued = 0  # bytes in _outgoing
        self._transport: asyncio.Transport | None = None
        self._progress = time.monotonic()  # last reply, or when the queue became non-empty
        self._watchdog: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Made only by create_connection / create_unix_connection: a stream transport.
        self._transport = cast("asyncio.Transport", transport)
        self._watchdog = self.loop.call_later(self._timeout / 4, self._check_overdue)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        self._progress = time.monotonic()
        pending = self._pending
        try:
            while (reply := self._reader.gets()) is not False:
                future = pending.popleft()
                if not future.done():  # its caller may have been cancelled: drop the reply
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked
            self.close(ConnectionError(f"unexpected data from the server: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(self.broken or ConnectionError(f"connection closed: {exc or 'by the server'}"))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- sending
    def send(self, commands: Sequence[bytes]) -> list[asyncio.Future[Any]]:
        """Queue packed commands; their futures resolve with the replies, in order."""
        return [self.send_one(command) for command in commands]

    def send_one(self, command: bytes) -> asyncio.Future[Any]:
        """Queue one packed command (as :meth:`send`); its future resolves with the reply."""
        if self.broken is not None:
            raise self.broken
        future = self.loop.create_future()
        idle = not self._pending  # then nothing is queued either
        self._pending.append(future)
        if idle:
            self._progress = time.monotonic()
            if self._transport is not None:
                self._transport.write(command)  # nobody to share a write with: send now
                return future
        if not self._outgoing:
            self.loop.call_soon(self._flush)
        self._outgoing.append(command)
        self._queued += len(command)
        if self._queued >= _FLUSH_BYTES:
            self._flush()  # a burst: send what is queued now rather than hold it all
        return future

    @property
    def blocked(self) -> bool:
        """Whether the socket's send buffer is over its high-water mark."""
        return not self._writable.is_set()

    async def writable(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()

    def close(self, reason: BaseException) -> None:
        """Close the socket; commands in flight fail with ``reason``."""
        self._fail(reason)
        if self._transport is not None:
            self._transport.abort()

    def _flush(self) -> None:
        if not self._outgoing:
            return  # sent already, when the queue grew past _FLUSH_BYTES
        data, self._outgoing, self._queued = b"".join(self._outgoing), [], 0
        if self._transport is not None and self.broken is None:
            self._transport.write(data)

    def _check_overdue(self) -> None:
        if self.broken is not None:
            return
        overdue = time.monotonic() - self._progress
        if self._pending and overdue > self._timeout:
            # A busy event loop runs this late, and may not have read replies that are
            # waiting on the socket: blame the server only if a turn that reads the
            # socket first (a timer due now runs after the turn's I/O) brings nothing.
            self._watchdog = self.loop.call_later(0, self._confirm_overdue, self._progress)
            return
        self._watchdog = self.loop.call_later(self._timeout / 4, self._check_overdue)

    def _confirm_overdue(self, progress: float) -> None:
        if self.broken is not None:
            return
        if self._pending and self._progress == progress:
            self.close(TimeoutError(f"no reply from Redis within {self._timeout:g} s"))
            return
        self._watchdog = self.loop.call_later(self._timeout / 4, self._check_overdue)

    def _fail(self, reason: BaseException) -> None:
        if self.broken is None:
            self.broken = reason
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._writable.set()
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(self.broken)
                # A caller that gave up never retrieves it: do not warn about that.
                future.exception()


@final
class RedisWire:
    """Commands to one Redis server over one multiplexed connection, opened lazily.

    Args:
        options: Where and how to connect.
    """

    def __init__(self, options: WireOptions) -> None:
        self._options = options
        self._connection: _Connection | None = None
        self._connecting: tuple[asyncio.Lock, asyncio.AbstractEventLoop] | None = None
        self._closed = False

    async def call(self, *args: Arg) -> Any:
        """Send one command and return its reply (an error reply as a :data:`ReplyError`).

        Raises:
            ConnectionError: The connection broke or could not be opened.
            TimeoutError: No reply within the timeout (the connection is dropped).
        """
        return await self.call_packed(pack(args))

    async def call_packed(self, command: bytes) -> Any:
        """As :meth:`call`, for a command already packed (:func:`pack`, :func:`pack_parts`)."""
        connection = self._connection
        if (
            connection is None
            or connection.broken is not None
            or connection.loop is not asyncio.get_running_loop()
        ):
            connection = await self._ready()
        future = connection.send_one(command)
        if connection.blocked:
            await connection.writable()
        return await future

    async def call_many(self, commands: Sequence[Sequence[Arg] | bytes]) -> list[Any]:
        """Send several commands (argument lists, or packed) and return their replies."""
        if not commands:
            return []
        connection = await self._ready()
        packed = [c if isinstance(c, bytes) else pack(c) for c in commands]
        futures = connection.send(packed)
        await connection.writable()
        return list(await asyncio.gather(*futures))

    async def aclose(self) -> None:
        """Close the connection; commands in flight fail. Safe to call more than once."""
        self._closed = True
        if self._connection is not None:
            _discard(self._connection, "the connection was closed")
            self._connection = None

    async def _ready(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = self._connection
        if connection is not None and connection.broken is None:
            if connection.loop is not loop:
                # Its socket belongs to that loop and cannot be closed from this one.
                raise StoreError(
                    "this Redis connection is open on another event loop: use the store "
                    "from one loop, or close it (aclose) on its loop first"
                )
            return connection
        if self._closed:
            raise ConnectionError("the connection was closed")
        if self._connecting is None or self._connecting[1] is not loop:
            self._connecting = (asyncio.Lock(), loop)
        async with self._connecting[0]:  # one connect at a time; the others then reuse it
            connection = self._connection
            if connection is None or connection.broken is not None:
                self._connection = connection = await self._connect()
        return connection

    async def _connect(self) -> _Connection:
        options, loop = self._options, asyncio.get_running_loop()

        def protocol() -> _Connection:
            return _Connection(loop, options.timeout)

        if options.path is not None:
            opening = loop.create_unix_connection(protocol, options.path)
        else:
            opening = loop.create_connection(
                protocol,
                options.host,
                options.port,
                ssl=options.tls,
                server_hostname=options.host if options.tls else None,
            )
        try:
            _, connection = await asyncio.wait_for(opening, options.connect_timeout)
        except TimeoutError:
            raise TimeoutError(f"could not connect within {options.connect_timeout:g} s") from None
        await self._handshake(connection)
        return connection

    async def _handshake(self, connection: _Connection) -> None:
        """AUTH, SELECT and CLIENT SETNAME, as the URL asks; a refusal closes the socket."""
        options = self._options
        steps: list[tuple[str, ...]] = []
        if options.password is not None:
            user = () if options.username is None else (options.username,)
            steps.append(("AUTH", *user, options.password))
        if options.db:
            steps.append(("SELECT", str(options.db)))
        if options.client_name:
            steps.append(("CLIENT", "SETNAME", options.client_name))
        replies = await asyncio.gather(*connection.send([pack(step) for step in steps]))
        for step, reply in zip(steps, replies, strict=True):
            if isinstance(reply, ReplyError):
                connection.close(ConnectionError(f"{step[0]} refused: {reply}"))
                raise ConnectionError(f"Redis refused {step[0]}: {reply}")


def _discard(connection: _Connection, reason: str) -> None:
    """Close a connection whose event loop may have been closed already."""
    with contextlib.suppress(RuntimeError):  # its loop is closed; the socket went with it
        connection.close(ConnectionError(reason))
