"""The floor: what writing the whole run state to Redis once per step costs at the least.

One "step" of the floor is ``msgpack.packb`` of the run's state (phasegraph's final
snapshot of the same loop, as plain data) plus one ``SET`` of those bytes, one round
trip to the Redis under test. It is measured three ways: through ``redis.asyncio`` (the
client phasegraph's store uses, on the same event loop), through the synchronous
redis-py client, and on a raw socket (hand-written RESP, no client library) as the lower
bound. Each floor case runs as many steps as the loop and takes its turn in the same
round robin as the engines, so machine drift affects it as it affects them.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import msgpack
import redis
import redis.asyncio
from bench_common import Case, Counted, Timed

from phasegraph import RunState
from phasegraph.views import jsonable

__all__ = ["Floor"]

SYSTEM = "floor"


class Floor:
    """Clients kept open for the whole benchmark, and the floor cases of each size."""

    def __init__(self, runner: asyncio.Runner, url: str, key: str) -> None:
        self.runner = runner
        self.key = key
        self.sync = redis.Redis.from_url(url)
        self.sync.set(key, b"")
        self.aio = redis.asyncio.Redis.from_url(url)
        runner.run(self.aio.set(key, b""))
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        db = parts.path.strip("/") or "0"
        self.sock.sendall(f"*2\r\n$6\r\nSELECT\r\n${len(db)}\r\n{db}\r\n".encode())
        self.sock.recv(64)
        self.head = f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n".encode()

    def close(self) -> None:
        self.sync.delete(self.key)
        self.sync.close()
        self.runner.run(self.aio.aclose())
        self.sock.close()

    def _raw_set(self, payload: bytes) -> None:
        self.sock.sendall(b"%s$%d\r\n%s\r\n" % (self.head, len(payload), payload))
        if self.sock.recv(64) != b"+OK\r\n":
            raise SystemExit("raw SET was not answered +OK")

    async def _aio_steps(self, plain: Any, steps: int) -> Timed:
        started = time.perf_counter()
        for _ in range(steps):
            await self.aio.set(self.key, msgpack.packb(plain, use_bin_type=True))
        return Timed(time.perf_counter() - started, steps)

    @staticmethod
    def _steps(one: Callable[[], Any], steps: int) -> Timed:
        started = time.perf_counter()
        for _ in range(steps):
            one()
        return Timed(time.perf_counter() - started, steps)

    def cases(self, state: RunState, steps: int) -> list[Case]:
        """encode alone, then encode + one SET per step three ways, ``steps`` steps a run."""
        plain = jsonable(state)
        size = len(msgpack.packb(plain, use_bin_type=True))

        def pack() -> bytes:
            return bytes(msgpack.packb(plain, use_bin_type=True))

        runs: dict[str, Callable[[], Timed]] = {
            "msgpack.packb only": lambda: self._steps(pack, steps),
            "packb + SET redis.asyncio": lambda: self.runner.run(self._aio_steps(plain, steps)),
            "packb + SET redis-py sync": lambda: self._steps(
                lambda: self.sync.set(self.key, pack()), steps
            ),
            "packb + SET raw socket": lambda: self._steps(lambda: self._raw_set(pack()), steps),
        }
        return [
            Case(
                SYSTEM,
                name,
                run=run,
                count=lambda: Counted(float(size), None),
                peer="Redis" if "SET" in name else None,
                note=f"the phasegraph snapshot of this loop, {size} B",
            )
            for name, run in runs.items()
        ]
