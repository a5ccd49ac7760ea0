"""The multiplexed Redis connection: ordering, cancellation, timeouts, handshake, TLS, unix."""

import asyncio
import contextvars
import dataclasses
import select
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from builders import free_port
from phasegraph.errors import StoreError, StoreUnavailableError
from phasegraph.store import _redis_wire, open_store
from phasegraph.store._redis_wire import RedisWire, ReplyError, WireOptions, pack
from phasegraph.store.redis import RedisStore
from phasegraph.testing import make_commit

pytestmark = pytest.mark.redis

# Keeps the server busy for ARGV[1] milliseconds, so a reply is reliably in flight.
_SPIN = """
local t = redis.call('TIME')
local stop = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1000 + math.floor(t[2] / 1000) >= stop
return 'done'
"""


def _options(redis_url: str, **changes: Any) -> WireOptions:
    parts = urlsplit(redis_url)
    db = int(parts.path[1:] or 0) if parts.path else 0
    base = WireOptions(host=parts.hostname or "127.0.0.1", port=parts.port or 6379, db=db)
    return dataclasses.replace(base, **changes)


@pytest.fixture
async def wire(redis_url: str) -> AsyncIterator[RedisWire]:
    opened = RedisWire(_options(redis_url))
    yield opened
    await opened.aclose()


async def test_replies_reach_their_own_callers(wire: RedisWire) -> None:
    words = [f"word-{i}".encode() * (i % 7 + 1) for i in range(300)]
    replies = await asyncio.gather(*(wire.call("ECHO", word) for word in words))
    assert replies == words


async def test_many_commands_in_one_write_answer_in_order(wire: RedisWire) -> None:
    replies = await wire.call_many([("ECHO", "a"), ("NOSUCHCOMMAND",), ("ECHO", 7)])
    assert replies[0] == b"a"
    assert isinstance(replies[1], ReplyError)
    assert replies[2] == b"7"


async def test_large_concurrent_writes_all_land_intact(wire: RedisWire) -> None:
    # 20 MiB queued in one loop turn, far larger than a socket buffer.
    values = {f"wire-test-big-{i}": bytes([i]) * (512 * 1024) for i in range(40)}
    replies = await asyncio.gather(*(wire.call("SET", key, v) for key, v in values.items()))
    assert replies == [b"OK"] * len(values)
    assert await wire.call_many([("GET", key) for key in values]) == list(values.values())
    assert await wire.call("DEL", *values) == len(values)


async def test_a_burst_is_written_as_it_grows_not_held_whole(
    wire: RedisWire, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of commands queued in one loop turn (thousands of runs committing) go out
    in writes of about _FLUSH_BYTES, in order, rather than all held, then copied, at once."""
    from phasegraph.store import _redis_wire

    await wire.call("PING")  # connected
    transport = wire._connection._transport  # type: ignore[union-attr]
    writes: list[int] = []
    write = transport.write
    monkeypatch.setattr(transport, "write", lambda data: (writes.append(len(data)), write(data)))
    words = [f"{i:05d}".encode() * 20 for i in range(3000)]  # 100 B each, 370 KB packed
    assert await asyncio.gather(*(wire.call("ECHO", word) for word in words)) == words
    command = len(pack(("ECHO", words[0])))
    assert len(writes) > sum(writes) // _redis_wire._FLUSH_BYTES
    assert max(writes) <= _redis_wire._FLUSH_BYTES + command


async def test_a_cancelled_caller_does_not_shift_the_replies(wire: RedisWire) -> None:
    slow = asyncio.ensure_future(wire.call("EVAL", _SPIN, 0, 200))
    await asyncio.sleep(0.05)
    behind = asyncio.ensure_future(wire.call("ECHO", "behind"))
    await asyncio.sleep(0)
    slow.cancel()
    assert await behind == b"behind"
    assert await wire.call("ECHO", "after") == b"after"


async def test_awaited_requests_resume_each_caller_with_its_own_reply_and_context(
    wire: RedisWire,
) -> None:
    await wire.call("PING")  # open: request sends at once only on an open connection
    mine: contextvars.ContextVar[int] = contextvars.ContextVar("mine")

    async def caller(i: int) -> tuple[bytes, int]:
        mine.set(i)
        reply = await wire.request(pack(("ECHO", f"word-{i}")))
        return reply, mine.get()

    got = await asyncio.gather(*(caller(i) for i in range(50)))
    assert got == [(f"word-{i}".encode(), i) for i in range(50)]


async def test_an_awaited_request_given_up_does_not_shift_the_replies(wire: RedisWire) -> None:
    await wire.call("PING")

    async def slow() -> Any:
        async with asyncio.timeout(0.05):
            return await wire.request(pack(("EVAL", _SPIN, 0, 200)))

    waiting = asyncio.ensure_future(slow())
    await asyncio.sleep(0)
    behind = asyncio.ensure_future(wire.request(pack(("ECHO", "behind"))))
    with pytest.raises(TimeoutError):
        await waiting
    assert await behind == b"behind"
    assert await wire.request(pack(("ECHO", "after"))) == b"after"


async def test_a_reply_that_comes_while_a_task_runs_resumes_its_caller_through_the_loop() -> None:
    reply = _redis_wire._Reply(asyncio.get_running_loop())

    async def caller() -> Any:
        return await reply

    waiting = asyncio.ensure_future(caller())
    await asyncio.sleep(0)  # it waits on the reply
    reply.set_result(b"late")  # from this task: the caller cannot be entered from here
    assert await waiting == b"late"


async def test_an_overdue_reply_drops_the_connection_and_the_next_call_reconnects(
    redis_url: str,
) -> None:
    wire = RedisWire(_options(redis_url, timeout=0.2))
    try:
        first_id = await wire.call("CLIENT", "ID")
        # Its reply, once read, would end the call: the error means the connection gave up
        # on it while the script still ran.
        with pytest.raises(TimeoutError):
            await wire.call("EVAL", _SPIN, 0, 800)
        assert await _answered(wire, "CLIENT", "ID") != first_id
    finally:
        await wire.aclose()


async def _answered(wire: RedisWire, *command: str | int) -> Any:
    """The reply to ``command``, asked again while it times out (the script may still run,
    and a loaded machine may make a reply late); each try opens a new connection."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await wire.call(*command)
        except TimeoutError:
            assert time.monotonic() < deadline, "no reply in 30 s"


async def _piped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, to: str) -> None:
    """Copy a connection's bytes to the Redis at ``to`` and its replies back, to the end."""
    upstream = urlsplit(to)
    up_reader, up_writer = await asyncio.open_connection(upstream.hostname, upstream.port)

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        finally:
            sink.close()
            await sink.wait_closed()

    await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))


async def test_a_connection_attempt_that_times_out_is_made_again_within_the_patience(
    redis_url: str,
) -> None:
    """A server whose backlog is full lets no connection open, and the attempt times out
    (the kernel drops the handshake, which is tried again only a second later). With a
    lease's patience the wire makes attempts until the server accepts again."""
    slow = socket.socket()
    slow.bind(("127.0.0.1", 0))
    slow.listen(0)
    filler = socket.create_connection(slow.getsockname())  # fills the backlog of one
    wire = RedisWire(_options(redis_url, port=slow.getsockname()[1], connect_timeout=0.05))
    opening = asyncio.ensure_future(wire.open(patience=60))
    pipes: list[asyncio.Task[None]] = []

    def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pipes.append(asyncio.ensure_future(_piped(reader, writer, redis_url)))

    try:
        await asyncio.sleep(0.3)  # attempts time out meanwhile, each after 50 ms
        assert not opening.done()
        accepted, _ = slow.accept()  # room in the backlog: the next attempt opens
        accepted.close()
        slow.setblocking(False)
        piping = await asyncio.start_server(pipe, sock=slow)  # it owns the socket now
        async with piping:
            await asyncio.wait_for(opening, 60)
            assert await wire.call("PING") == b"PONG"
            await wire.aclose()
            await asyncio.wait_for(asyncio.gather(*pipes), 60)  # each pipe ends with its wire
    finally:
        opening.cancel()
        await wire.aclose()
        filler.close()
        slow.close()  # closed already by the server, if it took it: then this does nothing


async def test_a_stalled_event_loop_is_not_taken_for_an_overdue_server(redis_url: str) -> None:
    """A callback that runs longer than the timeout must not fail replies read late."""
    wire = RedisWire(_options(redis_url, timeout=0.2))
    try:
        await wire.call("PING")
        connection = wire._connection  # white-box: stall the loop at the worst moment
        assert connection is not None
        assert connection._watchdog is not None
        assert connection._transport is not None
        socket = connection._transport.get_extra_info("socket")
        loop = asyncio.get_running_loop()
        sent: list[asyncio.Future[Any]] = []

        def send_then_stall() -> None:
            sent.append(connection.send_one(pack(("ECHO", "still here"))))
            # The loop is busy here while the reply becomes overdue and then arrives,
            # unread: on the socket, however slowly a loaded machine sends it.
            time.sleep(0.3)
            assert select.select([socket], [], [], 30)[0], "no reply on the socket in 30 s"

        def stall_before_the_watchdog() -> None:
            # Block until the watchdog is due, so it runs in the next turn right after
            # send_then_stall (a timer due joins a turn after its queued callbacks).
            time.sleep(max(0.0, connection._watchdog.when() - loop.time()) + 0.01)
            loop.call_soon(send_then_stall)

        loop.call_soon(stall_before_the_watchdog)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert await sent[0] == b"still here"
    finally:
        await wire.aclose()


async def test_a_command_sent_after_the_loop_stalled_waits_its_whole_timeout(
    redis_url: str,
) -> None:
    """A loop stalled past the timeout while nothing was pending does not make the next
    command overdue the moment the watchdog looks again."""
    wire = RedisWire(_options(redis_url, timeout=1.0))
    try:
        await wire.call("PING")
        connection = wire._connection  # white-box: send right after the stall
        assert connection is not None
        looked = connection._watchdog
        # Until the watchdog has looked once with nothing pending (its timer, renewed at each
        # look, has no event to wait on).
        while connection._watchdog is looked:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[asyncio.Future[Any]] = loop.create_future()

        def stall_then_send() -> None:
            # The watchdog last looked before this, with nothing pending; it runs again
            # right after, while the server still spins on this command.
            time.sleep(1.3)
            sent.set_result(connection.send_one(pack(("EVAL", _SPIN, 0, 300))))

        loop.call_soon(stall_then_send)
        assert await (await sent) == b"done"
    finally:
        await wire.aclose()


async def _by_call(wire: RedisWire, *command: str | int) -> Any:
    return await wire.call(*command)


async def _by_request(wire: RedisWire, *command: str | int) -> Any:
    return await wire.request(pack(command))  # the reply that resumes its caller as read


@pytest.mark.parametrize("send", [_by_call, _by_request], ids=["call", "request"])
async def test_a_killed_connection_fails_the_command_in_flight_then_reconnects(
    wire: RedisWire, redis_url: str, send: Callable[..., Awaitable[Any]]
) -> None:
    killer = RedisWire(_options(redis_url))
    try:
        own_id = await send(wire, "CLIENT", "ID")
        # A blocking pop keeps a command in flight (tests only: it stalls the connection).
        waiting = asyncio.ensure_future(send(wire, "BLPOP", "wire-test-empty-list", 5))
        await asyncio.sleep(0.05)
        assert await killer.call("CLIENT", "KILL", "ID", own_id) == 1
        with pytest.raises(ConnectionError):
            await waiting
        assert await send(wire, "ECHO", "again") == b"again"
        assert await send(wire, "CLIENT", "ID") != own_id
    finally:
        await killer.aclose()


def test_a_wire_open_on_one_event_loop_refuses_another(redis_url: str) -> None:
    wire = RedisWire(_options(redis_url))
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert first.run_until_complete(wire.call("PING")) == b"PONG"
        with pytest.raises(StoreError, match="another event loop"):
            second.run_until_complete(wire.call("PING"))
        first.run_until_complete(wire.aclose())
    finally:
        first.close()
        second.close()


async def test_a_closed_wire_refuses_calls(wire: RedisWire) -> None:
    await wire.call("PING")
    await wire.aclose()
    with pytest.raises(ConnectionError, match="closed"):
        await wire.call("PING")


async def test_the_url_selects_the_database(redis_url: str) -> None:
    parts = urlsplit(redis_url)
    async with open_store(f"redis://{parts.netloc}/5?prefix=dbtest") as store:
        assert isinstance(store, RedisStore)
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        probe = RedisWire(_options(redis_url, db=5))
        try:
            assert await probe.call("EXISTS", store.run_keys("r")[0]) == 1
            await probe.call("DEL", *store.run_keys("r"), "dbtest:runs")
        finally:
            await probe.aclose()


async def test_a_refused_password_names_the_server_not_the_password(redis_url: str) -> None:
    parts = urlsplit(redis_url)
    async with open_store(f"redis://:hunter2@{parts.netloc}/0") as store:
        with pytest.raises(StoreUnavailableError, match="AUTH") as caught:
            await store.read("r")
    assert "hunter2" not in str(caught.value)
    assert str(parts.port) in str(caught.value)


# -- a server of our own with a password, a unix socket and TLS


def _make_certificates(where: Path) -> None:
    """A throwaway CA and a server certificate for 127.0.0.1, made with openssl."""
    openssl = shutil.which("openssl")
    assert openssl, "these tests need the openssl command (apt-get install openssl)"

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=where, check=True, capture_output=True)

    # With the extensions a strict verifier (Python 3.13's default) asks of a CA and a leaf.
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (where / "san.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nauthorityKeyIdentifier=keyid\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "server.crt")  # fmt: skip


@pytest.fixture(scope="module")
def guarded_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, Path]]:
    """(unix socket path, TLS port, CA file) of a redis-server that wants a password."""
    exe = shutil.which("redis-server")
    assert exe, "the tests need redis-server"
    where = tmp_path_factory.mktemp("guarded-redis")
    _make_certificates(where)
    sock, tls_port = where / "redis.sock", free_port()
    process = subprocess.Popen(
        [exe, "--port", "0", "--unixsocket", str(sock), "--tls-port", str(tls_port),
         "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
         "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no",
         "--requirepass", "s3cret", "--save", "", "--appendonly", "no", "--dir", str(where)],
        cwd=where, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert process.poll() is None, "redis-server with TLS did not start"
            assert time.monotonic() < deadline, "redis-server with TLS did not start in 10 s"
            time.sleep(0.05)
        yield sock, tls_port, where / "ca.crt"
    finally:
        process.kill()
        process.wait()


async def _round_trip(url: str) -> None:
    async with open_store(url) as store:
        lease = await store.acquire("r", "w", 30)
        await store.commit(lease, make_commit("r", 0))
        assert (await store.read("r")).meta.seq == 0


async def test_a_unix_socket_with_a_password(guarded_redis: tuple[Path, int, Path]) -> None:
    sock, _, _ = guarded_redis
    await _round_trip(f"unix://:s3cret@{sock}?db=2&prefix=unix")


async def test_tls_verifies_the_server_against_the_given_ca(
    guarded_redis: tuple[Path, int, Path],
) -> None:
    _, port, ca = guarded_redis
    await _round_trip(f"rediss://:s3cret@127.0.0.1:{port}/0?ssl_ca_certs={ca}&prefix=tls")


async def test_tls_refuses_a_server_it_cannot_verify(
    guarded_redis: tuple[Path, int, Path],
) -> None:
    _, port, _ = guarded_redis
    async with open_store(f"rediss://:s3cret@127.0.0.1:{port}/0") as store:
        with pytest.raises(StoreUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            await store.read("r")
    # Unless told not to verify.
    await _round_trip(f"rediss://:s3cret@127.0.0.1:{port}/0?ssl_cert_reqs=none&prefix=tls2")


@pytest.mark.parametrize("before", [1, 2, 3], ids=["one reply", "two", "three"])
async def test_replies_read_before_garbage_reach_their_callers_and_the_rest_fail(
    before: int,
) -> None:
    """Data the protocol cannot parse closes the connection; the replies read before it
    still reach their callers, and the commands after them fail."""
    loop = asyncio.get_running_loop()
    connection = _redis_wire._Connection(loop, timeout=5.0)
    replies = [_redis_wire._Reply(loop) for _ in range(before + 1)]
    connection._pending.extend(replies)
    callers = [asyncio.ensure_future(_awaited(reply)) for reply in replies]
    await asyncio.sleep(0)  # each waits on its reply
    read = loop.create_future()
    data = b"".join(b"$1\r\n%d\r\n" % n for n in range(before)) + b"?garbage\r\n"
    # Handed over by the loop with no task running, as a socket's data is.
    loop.call_soon(lambda: (connection.data_received(data), read.set_result(None)))
    await read
    async with asyncio.timeout(60):  # a reply lost would leave its caller waiting for ever
        done = await asyncio.gather(*callers, return_exceptions=True)
    assert done[:before] == [b"%d" % n for n in range(before)]
    assert isinstance(done[before], ConnectionError)
    assert "unexpected data" in str(done[before])


async def _awaited(reply: Any) -> Any:
    return await reply


async def test_replies_read_together_reach_their_callers_though_the_first_closes_the_wire() -> None:
    """Every reply of one read is matched to its command before any caller resumes.

    A caller resumed by its reply may close the connection at once (a run's last commit,
    then its store closed); the replies read with it still reach their own callers.
    """
    loop = asyncio.get_running_loop()
    connection = _redis_wire._Connection(loop, timeout=5.0)
    first, second = _redis_wire._Reply(loop), _redis_wire._Reply(loop)
    connection._pending.extend((first, second))

    async def closes_the_wire() -> Any:
        got = await first
        connection.close(ConnectionError("closed by its caller"))
        return got

    async def waits() -> Any:
        return await second

    callers = asyncio.ensure_future(asyncio.gather(closes_the_wire(), waits()))
    await asyncio.sleep(0)  # both wait on their replies
    read = loop.create_future()
    # Handed over by the loop with no task running, as a socket's data is.
    loop.call_soon(
        lambda: (connection.data_received(b"$1\r\na\r\n$1\r\nb\r\n"), read.set_result(None))
    )
    await read
    assert await callers == [b"a", b"b"]


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            "OOM command not allowed when used memory > 'maxmemory'. script: "
            "77f7f2748e8c22ef8d674d764604388458359ae0, on @user_script:28.",
            "takes no writes now: OOM \"command not allowed when used memory > 'maxmemory'.\"",
        ),
        (
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to "
            "persist to disk.",
            'takes no writes now: MISCONF "Redis is configured to save RDB snapshots',
        ),
        ("LOADING Redis is loading the dataset in memory", "is not ready: LOADING Redis is"),
        ("BUSY Redis is busy running a script.", "is not ready: BUSY"),
    ],
)
def test_a_full_or_starting_server_is_an_outage_quoting_it(reply: str, said: str) -> None:
    found = _redis_wire.outage("redis://h:1/0", reply)
    assert isinstance(found, StoreUnavailableError)
    assert str(found).startswith(f"Redis at redis://h:1/0 {said}")
    assert "script:" not in str(found)


def test_a_refused_command_is_no_outage() -> None:
    assert _redis_wire.outage("redis://h:1/0", "ERR unknown command 'NOPE'") is None
    assert _redis_wire.outage("redis://h:1/0", "WRONGTYPE Operation against a key") is None
