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

:class:`ClusterWire` speaks to a Redis Cluster the same way: one such connection per
primary, each command sent to the primary serving its key's hash slot (read from
``CLUSTER SLOTS``), ``MOVED`` repointing the slot and ``ASK`` followed once. Both classes
take the same calls, so the store is written once for a server and a cluster.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast, final

import hiredis

from phasegraph.errors import StoreError, StoreUnavailableError

__all__ = [
    "CONNECT_TIMEOUT",
    "Arg",
    "ClusterWire",
    "RedisWire",
    "ReplyError",
    "WireOptions",
    "key_slot",
    "outage",
    "pack",
    "pack_parts",
]

Arg = bytes | str | int | float

ReplyError: Final = hiredis.ReplyError
"""What an error reply (``-ERR ...``) is returned as: a value, not raised by the wire."""

# Error replies of a server that cannot serve a command now but may soon: loading its data
# after a restart, busy in a script, failing over; or full: over its maxmemory with the
# noeviction policy (OOM), unable to save its snapshot, mostly for a full disk (MISCONF).
_NOT_READY: Final = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN")
_FULL: Final = ("OOM", "MISCONF")
# Where in a script an error was raised, as Redis appends it to the error's message.
_SCRIPT_PLACE: Final = re.compile(r"\s*script: [0-9a-f]+, on @\S+$")


def outage(where: str, reply: str) -> StoreUnavailableError | None:
    """The outage an error reply tells of, or ``None`` if it refuses the command itself.

    A server that is starting, failing over or full refuses every write until it is not:
    the store's callers wait and retry such an error, as they do a broken connection, and
    a run that must stop on it stops resumable (``phasegraph resume`` once it takes
    writes). The message quotes the server's own words.

    Args:
        where: The server, as messages name it (no password).
        reply: The error reply's text, its code first (``OOM command not allowed ...``).
    """
    code = reply.partition(" ")[0]
    if code in _NOT_READY:
        return StoreUnavailableError(f"Redis at {where} is not ready: {reply}")
    if code in _FULL:
        said = _SCRIPT_PLACE.sub("", reply.partition(" ")[2])
        return StoreUnavailableError(f'Redis at {where} takes no writes now: {code} "{said}"')
    return None


CONNECT_TIMEOUT: Final = 5.0
"""Seconds a connection may take to open, unless the URL says (``socket_connect_timeout``):
as long as a reply may take, so a loop kept busy by thousands of runs is not taken for a
Redis that is away (an unreachable port is refused at once, whatever this is). A caller
with more patience (:meth:`RedisWire.open`) has an attempt that times out made again."""

# Waits between connection attempts that timed out, the last repeated until the caller's
# patience runs out.
_CONNECT_BACKOFF: Final = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)


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
    connect_timeout: float = CONNECT_TIMEOUT
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


@final
class _Reply:
    """The reply to one command, awaited by one task, which it resumes as soon as it comes.

    An asyncio future resumes the task awaiting it on the event loop's next turn: one more
    poll of every socket, and a callback handle, between the reply and its caller. A reply
    comes in the protocol's ``data_received``, which the loop calls with no task running,
    so this one resumes its task right there (in the task's own context), as that next
    turn would. Anything else that completes it (a broken connection, a cancellation), or
    a reply that comes while a task runs, resumes the task the usual way, through the loop.

    It takes the part of a future that a task awaiting it calls (``add_done_callback``,
    ``result``, ``cancel``), and that the connection calls; it is not for ``gather`` or
    ``wait``. A task finds the loop of a future-like object without ``get_loop`` in its
    ``_loop`` attribute, so this has none: one Python call fewer per reply.
    """

    __slots__ = ("_asyncio_future_blocking", "_exception", "_loop", "_result", "_state", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._asyncio_future_blocking = False  # what tells a task it may wait on this
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiter: tuple[Callable[[_Reply], object], contextvars.Context] | None = None

    def __await__(self) -> Generator[_Reply, None, Any]:
        if self._state is _PENDING:
            self._asyncio_future_blocking = True
            yield self  # to the task, which calls add_done_callback
        if self._exception is not None:  # result(), written out: once per commit
            raise self._exception
        return self._result

    def add_done_callback(
        self, callback: Callable[[_Reply], object], *, context: contextvars.Context | None = None
    ) -> None:
        """Resume the awaiting task with ``callback`` once done (one waiter only)."""
        if self._waiter is not None:
            raise RuntimeError("a reply is awaited by one task only")
        waiter = (callback, contextvars.copy_context() if context is None else context)
        if self._state is not _PENDING:
            self._loop.call_soon(callback, self, context=waiter[1])
            return
        self._waiter = waiter

    def done(self) -> bool:
        """Whether the reply came, or the command failed or was cancelled."""
        return self._state is not _PENDING

    def cancelled(self) -> bool:
        """Whether the waiting task was cancelled."""
        return self._state is _CANCELLED

    def result(self) -> Any:
        """The reply; the failure raised.

        Raises:
            asyncio.CancelledError: The waiting task was cancelled.
            asyncio.InvalidStateError: No reply yet.
        """
        if self._state is _PENDING:
            raise asyncio.InvalidStateError("the reply has not come")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        """The failure, or ``None``."""
        return self._exception

    def set_result(self, result: Any) -> None:
        """The reply came: resume the waiting task now (see the class docstring).

        Dropped if the task stopped waiting (cancelled) or the command failed already.
        """
        if self._state is not _PENDING:
            return
        self._result, self._state = result, _DONE
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            callback, context = waiter
            try:
                context.run(callback, self)
            except RuntimeError:  # a task is running (asyncio will not enter another)
                self._loop.call_soon(callback, self, context=context)

    def set_exception(self, exception: BaseException) -> None:
        """The command failed: the waiting task gets ``exception`` on the loop's next turn."""
        self._exception, self._state = exception, _DONE
        self._schedule()

    def cancel(self, msg: object = None) -> bool:
        """Stop waiting (a task's ``cancel``); ``False`` if done already."""
        if self._state is not _PENDING:
            return False
        self._exception, self._state = asyncio.CancelledError(msg), _CANCELLED
        self._schedule()
        return True

    def _schedule(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon(waiter[0], self, context=waiter[1])


_PENDING: Final = "pending"
_DONE: Final = "done"
_CANCELLED: Final = "cancelled"


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
        self._pending: collections.deque[asyncio.Future[Any] | _Reply] = collections.deque()
        self._outgoing: list[bytes] = []
        self._queued = 0  # bytes in _outgoing
        self._transport: asyncio.Transport | None = None
        # The watchdog's sign of life is a count of reads, and of commands sent with nothing
        # pending; the watchdog notes when it last saw the count move (or nothing pending),
        # which spares every read and send a look at the clock.
        self._progress = 0
        self._seen = 0  # the count the watchdog last saw
        self._since = time.monotonic()  # when it saw the count move, or nothing pending
        self._watchdog: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self.blocked = False  # whether the socket's send buffer is over its high-water mark

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Made only by create_connection / create_unix_connection: a stream transport.
        self._transport = cast("asyncio.Transport", transport)
        self._watchdog = self.loop.call_later(self._timeout / 4, self._check_overdue)

    def data_received(self, data: bytes) -> None:
        gets, pending = self._reader.gets, self._pending
        self._reader.feed(data)
        self._progress += 1
        answered: Sequence[tuple[asyncio.Future[Any] | _Reply, Any]] = ()
        try:
            # Each reply is in ``answered`` as soon as it is matched: garbage after it
            # closes the connection, and a command matched already must still get it.
            if (reply := gets()) is not False:
                answered = (first := (pending.popleft(), reply),)  # the usual read: one
                if (reply := gets()) is not False:
                    answered = many = [first, (pending.popleft(), reply)]
                    while (reply := gets()) is not False:
                        many.append((pending.popleft(), reply))
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked
            self.close(ConnectionError(f"unexpected data from the server: {exc!r}"))
        # Every reply is matched to its command before any is handed over: a _Reply resumes
        # its task right here, and that task may send, or close this connection, at once.
        for future, reply in answered:
            if type(future) is _Reply:
                future.set_result(reply)  # dropped if its caller was cancelled
            elif not future.done():  # its caller was cancelled: drop the reply
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(self.broken or ConnectionError(f"connection closed: {exc or 'by the server'}"))

    def pause_writing(self) -> None:
        self.blocked = True
        self._writable.clear()

    def resume_writing(self) -> None:
        self.blocked = False
        self._writable.set()

    # -- sending
    def send(self, commands: Sequence[bytes]) -> list[asyncio.Future[Any]]:
        """Queue packed commands; their futures resolve with the replies, in order."""
        return [self.send_one(command) for command in commands]

    def send_one(self, command: bytes) -> asyncio.Future[Any]:
        """Queue one packed command (as :meth:`send`); its future resolves with the reply."""
        future = self.loop.create_future()
        self.queue(command, future)
        return future

    def queue(self, command: bytes, future: asyncio.Future[Any] | _Reply) -> None:
        """Queue one packed command whose reply ``future`` (or a :class:`_Reply`) receives."""
        if self.broken is not None:
            raise self.broken
        idle = not self._pending  # then nothing is queued either
        self._pending.append(future)
        if idle:
            self._progress += 1  # the wait for this reply starts now, not at the last reply
            if self._transport is not None:
                self._transport.write(command)  # nobody to share a write with: send now
                return
        if not self._outgoing:
            self.loop.call_soon(self._flush)
        self._outgoing.append(command)
        self._queued += len(command)
        if self._queued >= _FLUSH_BYTES:
            self._flush()  # a burst: send what is queued now rather than hold it all

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
        now = time.monotonic()
        if not self._pending or self._progress != self._seen:
            # Nothing owed, or replies came (or a wait began) since the last look: a reply
            # is judged overdue only once a whole timeout passed with neither.
            self._seen, self._since = self._progress, now
        elif now - self._since > self._timeout:
            # A busy event loop runs this late, and may not have read replies that are
            # waiting on the socket: blame the server only if a turn that reads the
            # socket first (a timer due now runs after the turn's I/O) brings nothing.
            self._watchdog = self.loop.call_later(0, self._confirm_overdue, self._progress)
            return
        self._watchdog = self.loop.call_later(self._timeout / 4, self._check_overdue)

    def _confirm_overdue(self, progress: int) -> None:
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
        self.blocked = False
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

    @property
    def host(self) -> str:
        """The server's host name or address (as the options give it)."""
        return self._options.host

    async def call(self, *args: Arg) -> Any:
        """Send one command and return its reply (an error reply as a :data:`ReplyError`).

        Raises:
            ConnectionError: The connection broke or could not be opened.
            TimeoutError: No reply within the timeout (the connection is dropped).
        """
        return await self.call_packed(pack(args))

    async def call_packed(self, command: bytes, key: Arg = b"") -> Any:
        """As :meth:`call`, for a command already packed (:func:`pack`, :func:`pack_parts`).

        ``key`` is unused: one server serves every key (a cluster's wire routes by it).
        """
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

    def request(self, command: bytes, key: Arg = b"") -> Awaitable[Any]:
        """Send a packed command now if the connection is open and writable; await its reply.

        As :meth:`call_packed`, but on an open connection nothing runs between the caller
        and the reply (no coroutine of the wire's own to step through twice), and the reply
        resumes the caller as it is read (:class:`_Reply`). Awaited once, by one task.
        """
        connection = self._connection
        if (
            connection is None
            or connection.broken is not None
            or connection.blocked
            or connection.loop is not asyncio.get_running_loop()
        ):
            return self.call_packed(command, key)
        reply = _Reply(connection.loop)
        connection.queue(command, reply)
        return reply

    async def call_many(self, commands: Sequence[Sequence[Arg] | bytes]) -> list[Any]:
        """Send several commands (argument lists, or packed) and return their replies."""
        if not commands:
            return []
        connection = await self._ready()
        packed = [c if isinstance(c, bytes) else pack(c) for c in commands]
        futures = connection.send(packed)
        await connection.writable()
        return list(await asyncio.gather(*futures))

    async def open(self, key: Arg = b"", *, patience: float) -> None:
        """Open the connection now if it is not open, trying again while attempts time out.

        A connection attempt times out when the server is slow to accept (its backlog is
        full) or this process's event loop is too busy to see it open (thousands of runs
        starting at once); neither means the server is away. Attempts are made again
        until ``patience`` seconds have passed; a refused one (nothing listens) is not.
        ``key`` is unused (a cluster's wire opens the connection of its primary).

        Raises:
            ConnectionError: The connection could not be opened, or the wire is closed.
            TimeoutError: Every attempt timed out, and the patience ran out.
        """
        await self._ready(patience)

    async def aclose(self) -> None:
        """Close the connection; commands in flight fail. Safe to call more than once."""
        self._closed = True
        if self._connection is not None:
            _discard(self._connection, "the connection was closed")
            self._connection = None

    async def _ready(self, patience: float = 0.0) -> _Connection:
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
                self._connection = connection = await self._connect(patience)
        return connection

    async def _connect(self, patience: float) -> _Connection:
        """A new connection; attempts that time out are made again for ``patience`` s."""
        loop = asyncio.get_running_loop()
        give_up, waits = loop.time() + patience, iter(_CONNECT_BACKOFF)
        while True:
            try:
                return await self._connect_once()
            except TimeoutError:
                wait = next(waits, _CONNECT_BACKOFF[-1])
                if loop.time() + wait >= give_up or self._closed:
                    raise
            await asyncio.sleep(wait)

    async def _connect_once(self) -> _Connection:
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
            # Not wait_for: a connection that opens just as it times out would be lost
            # there with its socket still open.
            async with asyncio.timeout(options.connect_timeout):
                _, connection = await opening
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


# -- a Redis Cluster: one wire per primary, each command sent to its key's slot's primary

_SLOTS: Final = 16384
_REDIRECTS: Final = 5  # MOVED / ASK followed per command before the reply is given up on
_ASKING: Final = pack(("ASKING",))
# Refusals that mean "this slot is not served right now" (a failover, a slot migrating):
# raised like a broken connection, so a commit is retried and anything else reported
# as the cluster being unreachable.
_NOT_NOW: Final = ("CLUSTERDOWN", "TRYAGAIN")
_BROKEN: Final = (ConnectionError, TimeoutError, OSError)


def _crc16_table() -> tuple[int, ...]:
    """CRC-16/XMODEM (polynomial 0x1021), the checksum Redis Cluster hashes keys with."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16: Final = _crc16_table()


def key_slot(key: Arg) -> int:
    """The cluster hash slot of ``key``: of its hash tag (the first ``{...}``) if non-empty."""
    data = key if isinstance(key, bytes) else str(key).encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc % _SLOTS


@final
class ClusterWire:
    """Commands to a Redis Cluster, each on the primary that serves its key's hash slot.

    The slot map is read (``CLUSTER SLOTS``) before the first command and again after a
    node could not be reached (a failover moves its slots to another node). A ``MOVED``
    reply repoints its slot and the command is sent there; an ``ASK`` reply (a slot being
    migrated) sends it once to the node named, after ``ASKING``. Each primary gets one
    :class:`RedisWire`, opened when a command first goes there. Replicas are not used.

    Args:
        options: How to connect; ``host`` and ``port`` name any one node of the cluster.
    """

    def __init__(self, options: WireOptions) -> None:
        self._options = options
        self._seed = (options.host, options.port)
        self._nodes: dict[tuple[str, int], RedisWire] = {}
        self._slots: list[RedisWire | None] = []  # empty: to be read
        self._mapping: tuple[asyncio.Lock, asyncio.AbstractEventLoop] | None = None
        self._closed = False

    async def call(self, *args: Arg) -> Any:
        """One command on the primary of its key (its first argument after the name)."""
        return await self.call_packed(pack(args), args[1])

    async def call_packed(self, command: bytes, key: Arg) -> Any:
        """A packed command on the primary of ``key``'s slot; its reply, as :meth:`RedisWire.call`.

        Raises:
            ConnectionError: A node could not be reached, no node answered with the slot
                map, or the cluster does not serve the slot now (``CLUSTERDOWN``,
                ``TRYAGAIN``).
            TimeoutError: A node's reply was overdue.
        """
        slot = key_slot(key)
        node = await self._primary(slot)
        asking = False
        for _ in range(_REDIRECTS):
            try:
                if asking:
                    reply = (await node.call_many((_ASKING, command)))[1]
                else:
                    reply = await node.call_packed(command)
            except _BROKEN:
                self._slots = []  # its slots may be another node's now: read the map again
                raise
            if not isinstance(reply, ReplyError):
                return reply
            kind, _, where = str(reply).partition(" ")
            if kind in _NOT_NOW:
                raise ConnectionError(str(reply))
            if kind not in ("MOVED", "ASK"):
                return reply
            node = self._node(*_address(where.rpartition(" ")[2], node))
            asking = kind == "ASK"
            if not asking and self._slots:
                self._slots[slot] = node
        return reply

    def request(self, command: bytes, key: Arg) -> Awaitable[Any]:
        """:meth:`call_packed`, as :meth:`RedisWire.request` is called."""
        return self.call_packed(command, key)

    async def open(self, key: Arg = b"", *, patience: float) -> None:
        """Open the connection to the primary of ``key``'s slot, as :meth:`RedisWire.open`.

        The slot map is read first if it is not known, with the same patience.
        """
        node = await self._primary(key_slot(key), patience)
        await node.open(patience=patience)

    async def call_many(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Commands, each on the primary of its key (its first argument after the name).

        Those of one node share that node's write; replies in order.
        """
        return list(await asyncio.gather(*(self.call(*command) for command in commands)))

    async def aclose(self) -> None:
        """Close every node's connection. Safe to call more than once."""
        self._closed = True
        nodes, self._nodes, self._slots = list(self._nodes.values()), {}, []
        for node in nodes:
            await node.aclose()

    async def _primary(self, slot: int, patience: float = 0.0) -> RedisWire:
        slots = self._slots or await self._mapped(patience)
        node = slots[slot]
        if node is None:
            raise ConnectionError(f"no node of the cluster serves hash slot {slot}")
        return node

    async def _mapped(self, patience: float = 0.0) -> list[RedisWire | None]:
        """The slot map, read by one command while the others wait for it."""
        if self._closed:
            raise ConnectionError("the connection was closed")
        loop = asyncio.get_running_loop()
        if self._mapping is None or self._mapping[1] is not loop:
            self._mapping = (asyncio.Lock(), loop)
        async with self._mapping[0]:
            if not self._slots:
                self._slots = await self._read_map(patience)
        return self._slots

    async def _read_map(self, patience: float) -> list[RedisWire | None]:
        """Ask the nodes (the URL's first, then those known) for the slot map.

        Raises:
            ConnectionError: No node answered with one, or the URL's node is not in
                cluster mode.
        """
        failures: list[str] = []
        for address in dict.fromkeys((self._seed, *self._nodes)):
            node = self._node(*address)
            try:
                await node.open(patience=patience)
                reply = await node.call("CLUSTER", "SLOTS")
            except _BROKEN as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            if isinstance(reply, ReplyError):
                if "cluster support disabled" in str(reply):
                    raise ConnectionError(f"Cluster mode is not enabled on this node: {reply}")
                failures.append(f"{address[0]}:{address[1]}: {reply}")
                continue
            slots: list[RedisWire | None] = [None] * _SLOTS
            for first, last, primary, *_replicas in reply:
                host = primary[0].decode()
                owner = self._node(host if host not in ("", "?") else address[0], primary[1])
                slots[first : last + 1] = [owner] * (last + 1 - first)
            return slots
        raise ConnectionError("no node of the cluster answered: " + "; ".join(failures))

    def _node(self, host: str, port: int) -> RedisWire:
        node = self._nodes.get((host, port))
        if node is None:
            options = dataclasses.replace(self._options, host=host, port=int(port))
            node = self._nodes[(host, port)] = RedisWire(options)
        return node


def _address(where: str, asked: RedisWire) -> tuple[str, int]:
    """``host:port`` of a redirection (an empty host: the node that sent it)."""
    host, _, port = where.rpartition(":")
    return host or asked.host, int(port)
