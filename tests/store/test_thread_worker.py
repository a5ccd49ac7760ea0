"""The worker thread a blocking store hands its calls to."""

import asyncio
import collections
import fcntl
import threading

import pytest

from phasegraph.errors import StoreUnavailableError
from phasegraph.store._thread_worker import ThreadWorker


async def test_calls_run_in_order_on_one_other_thread() -> None:
    worker = ThreadWorker("test-worker")
    assert not worker.started
    seen: list[tuple[int, str]] = []

    def note(n: int) -> int:
        seen.append((n, threading.current_thread().name))
        return n * 10

    results = await asyncio.gather(*(worker.call(note, n) for n in range(20)))
    worker.stop()
    assert results == [n * 10 for n in range(20)]
    assert [n for n, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"test-worker"}


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = ThreadWorker("test-worker")

    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await worker.call(fail)
    assert await worker.call(lambda: "still here") == "still here"
    worker.stop()


async def test_a_cancelled_caller_leaves_the_call_to_finish() -> None:
    worker = ThreadWorker("test-worker")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(timeout=30)
        finished.set()
        return "done"

    task = asyncio.create_task(worker.call(slow))
    await asyncio.sleep(0)
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await worker.call(lambda: finished.is_set())  # ran to the end, in order
    worker.stop()


async def test_stop_lets_queued_calls_finish_then_refuses_new_ones() -> None:
    worker = ThreadWorker("test-worker")
    pending = [asyncio.ensure_future(worker.call(lambda n=n: n)) for n in range(5)]
    await asyncio.sleep(0)  # the calls are queued before the stop
    worker.stop()
    worker.stop()
    assert await asyncio.gather(*pending) == list(range(5))
    with pytest.raises(StoreUnavailableError, match="stopped"):
        await worker.call(lambda: None)


async def test_a_thread_that_ends_before_the_stop_wakes_it_is_no_error() -> None:
    # The thread, still draining an earlier wake-up, may take the stop marker and close its
    # end of the pipe before stop() writes its own wake-up: stop() must stay quiet.
    worker = ThreadWorker("test-worker")
    gate, inside = threading.Event(), threading.Event()

    def first_call() -> bool:
        inside.set()
        return gate.wait(30)

    first = asyncio.ensure_future(worker.call(first_call))
    assert await asyncio.to_thread(inside.wait, 30)  # the thread is inside the first call

    class _ThreadEndsFirst(collections.deque[object]):
        def append(self, job: object) -> None:
            super().append(job)
            if job is None:  # the stop marker: let the thread take it and end, now
                gate.set()
                assert worker._thread is not None
                worker._thread.join(30)

    worker._jobs = _ThreadEndsFirst()
    worker.stop()
    assert await first
    with pytest.raises(StoreUnavailableError, match="stopped"):
        await worker.call(lambda: None)


def test_a_closed_loop_does_not_break_the_thread() -> None:
    worker = ThreadWorker("test-worker")
    release = threading.Event()
    loop = asyncio.new_event_loop()
    task = loop.create_task(worker.call(release.wait, 30))
    loop.run_until_complete(asyncio.sleep(0))
    task.cancel()
    loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    loop.close()
    release.set()  # the call now reports to a closed loop
    assert asyncio.run(worker.call(lambda: "next loop")) == "next loop"
    worker.stop()


async def test_more_calls_than_the_wake_up_pipe_holds_all_run() -> None:
    worker = ThreadWorker("test-worker")
    gate = threading.Event()
    first = asyncio.ensure_future(worker.call(gate.wait, 30))
    await asyncio.sleep(0)
    fcntl.fcntl(worker._wake, fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe Linux allows
    many = [asyncio.ensure_future(worker.call(lambda n=n: n)) for n in range(10_000)]
    await asyncio.sleep(0)  # every call is queued (and the pipe overfull) before the gate opens
    gate.set()
    assert await first
    assert await asyncio.gather(*many) == list(range(10_000))
    worker.stop()
