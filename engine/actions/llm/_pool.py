"""What model calls keep open between calls: one client (or server) per endpoint and loop.

A model call reuses the ``openai`` client of its endpoint, and so its keep-alive
connections, instead of opening a client, a connection (and against a real provider a
TLS handshake) per turn; a node's ``with.llm.script`` is served by one scripted server
per script. A client's connections belong to the event loop that opened them, so what
is kept is kept per loop: in a process that runs one loop, one client per endpoint.

What is kept is closed by :meth:`phasegraph.Engine.aclose` (``async with Engine(...)``):
it closes what the running loop keeps, and the next call opens anew. Whatever no engine
closed is closed when the loop shuts down: ``asyncio.run`` and every ``asyncio.Runner``
close the loop's async generators before closing it (``loop.shutdown_asyncgens``), and
each pool holds one such generator whose ``finally`` closes the pool. A client in use
when its pool closes is closed when its last call ends, so closing never breaks a call
in flight (another engine's, on the same loop).

Imports nothing heavy: the engine closes the pool without loading ``openai``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = ["LoopPool", "close_loop_pool", "loop_pool"]

R = TypeVar("R")
Closer = Callable[[Any], Awaitable[None]]


@dataclass(slots=True)
class _Kept:
    resource: Any
    close: Closer
    users: int = 0
    retired: bool = False


class LoopPool:
    """The resources model calls keep open on one event loop, by key."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, _Kept] = {}
        self._opening = asyncio.Lock()
        self._until_loop_ends: AsyncGenerator[None, None] | None = None

    @property
    def kept(self) -> int:
        """How many resources are open and reusable."""
        return len(self._kept)

    @contextlib.asynccontextmanager
    async def use(
        self, key: Hashable, open: Callable[[], Awaitable[R]], close: Callable[[R], Awaitable[None]]
    ) -> AsyncIterator[R]:
        """The resource kept under ``key`` (opened by ``open`` if none is), for one call.

        Args:
            key: What the resource serves (an endpoint, a script).
            open: Opens it; called once per key until the pool closes.
            close: Closes it, when the pool closes and no call uses it.
        """
        kept = self._kept.get(key) or await self._open(key, open, close)
        kept.users += 1
        try:
            yield cast(R, kept.resource)
        finally:
            kept.users -= 1
            if kept.retired and not kept.users:
                await asyncio.shield(kept.close(kept.resource))

    async def _open(
        self, key: Hashable, open: Callable[[], Awaitable[R]], close: Callable[[R], Awaitable[None]]
    ) -> _Kept:
        async with self._opening:  # two first calls at once open one resource, not two
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = _Kept(await open(), cast(Closer, close))
            return kept

    async def aclose(self) -> None:
        """Close every resource no call is using; the others close when their call ends."""
        retired, self._kept = self._kept, {}
        idle = []
        for kept in retired.values():
            kept.retired = True
            if not kept.users:
                idle.append(kept.close(kept.resource))
        await asyncio.gather(*idle)

    async def _closed_with_the_loop(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await self.aclose()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPool] = weakref.WeakKeyDictionary()


async def loop_pool() -> LoopPool:
    """The running loop's pool (made on first use, closed at the latest with the loop)."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = LoopPool()
        # Started here, in the loop, so that the loop finalizes it at shutdown; the pool
        # holds it (the loop only keeps a weak reference).
        pool._until_loop_ends = pool._closed_with_the_loop()
        await anext(pool._until_loop_ends)
    return pool


async def close_loop_pool() -> None:
    """Close what the running loop's model calls keep open (nothing if they keep nothing)."""
    pool = _pools.get(asyncio.get_running_loop())
    if pool is not None:
        await pool.aclose()
