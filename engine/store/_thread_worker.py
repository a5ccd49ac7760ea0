"""One worker thread that runs blocking calls, in order, for coroutines on event loops.

A store whose driver blocks (``sqlite3``) hands each call to this thread and awaits the
result. The hop is kept as small as it can be: the call goes on a deque, one byte on a
pipe wakes the thread, and one ``call_soon_threadsafe`` wakes the loop with the result —
no executor work item, no chained ``concurrent.futures`` future.

Why a pipe and not a queue: ``os.write`` lets go of the GIL around the system call, so
the thread it wakes can take the GIL at once. A queue's ``put`` wakes the thread while
the caller still holds the GIL, so the thread wakes only to wait for it; on a busy
machine, where both threads share a core, that costs several extra context switches per
call (measured: about six per call instead of two).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar, final

from phasegraph.errors import StoreUnavailableError

__all__ = ["ThreadWorker"]

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


@final
class ThreadWorker:
    """A lazily started thread that runs submitted calls one at a time, first in first out.

    A call whose awaiting task is cancelled still runs to completion in the thread (its
    result is dropped), so a call must be safe to finish unobserved.

    The thread is a daemon: a program that never calls :meth:`stop` can still exit. A
    call cut off that way never reports back, which is no worse than a process killed at
    the same moment (the caller must already tolerate that).

    Args:
        name: The thread's name (shown in debuggers and profilers).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: collections.deque[_Job | None] = collections.deque()
        self._thread: threading.Thread | None = None
        self._wake = -1  # the pipe's write end, once started
        self._stopped = False

    @property
    def started(self) -> bool:
        """Whether the thread was started (by a first :meth:`call`)."""
        return self._thread is not None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the thread after every call submitted before it.

        Returns:
            What ``fn`` returned.

        Raises:
            StoreUnavailableError: :meth:`stop` was called.
            BaseException: Whatever ``fn`` raised.
        """
        if self._stopped:
            raise StoreUnavailableError(f"worker thread {self._name!r} is stopped")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._start()
        self._jobs.append((loop, future, fn, args))
        self._signal()
        return await future

    def stop(self) -> None:
        """Let the thread end once the calls already submitted are done (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._jobs.append(None)
            self._signal()
            os.close(self._wake)

    def _start(self) -> None:
        read_end, self._wake = os.pipe()
        # Never block the event loop: a full pipe already holds unread wake-ups.
        os.set_blocking(self._wake, False)
        self._thread = threading.Thread(
            target=self._run, args=(read_end,), name=self._name, daemon=True
        )
        self._thread.start()

    def _signal(self) -> None:
        # A full pipe already holds unread wake-ups. A closed read end means the thread
        # took the stop marker while draining an earlier wake-up: nobody is left to wake.
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self._wake, b"\0")

    def _run(self, read_end: int) -> None:
        try:
            while True:
                os.read(read_end, 512)
                # Drain: one read may stand for several calls, or for none left.
                while self._jobs:
                    job = self._jobs.popleft()
                    if job is None:
                        return
                    _run_job(*job)
                    del job  # drop the finished call's references before blocking again
        finally:
            os.close(read_end)


def _run_job(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    result: Any = None
    error: BaseException | None = None
    try:
        result = fn(*args)
    except BaseException as exc:  # handed to the awaiting coroutine, never lost
        error = exc
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller was cancelled; the call still ran to completion
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
