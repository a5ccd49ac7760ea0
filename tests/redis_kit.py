"""A private redis-server that keeps every write across a restart, for outage tests."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import redis

from builders import free_port


class RestartableRedis:
    """A private redis-server that keeps every write across a restart (AOF, fsync always).

    Args:
        workdir: Where its append-only files go.
    """

    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("redis-server")
        assert exe, "this test needs redis-server on PATH"
        self.port = free_port()
        self.argv = [
            *(exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(workdir)),
            *("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
        ]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *options: str, ready: bool = True) -> None:
        """Start the server (``options`` added to its command line).

        Args:
            options: More ``--name value`` settings.
            ready: Wait until it answers PING (else only until it accepts connections:
                it may still be loading its data).
        """
        self.process = subprocess.Popen(
            [*self.argv, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        try:
            wait_for(lambda: _answers(client, ready), "redis-server to start")
        finally:
            client.close()

    def kill(self) -> None:
        """Kill the server (SIGKILL: as a crash would; what it acknowledged is on disk)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Shut the server down (SIGTERM: it writes what it has, then exits)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)

    def fill(self, keys: int, size: int, prefix: str = "ballast") -> None:
        """Write ``keys`` values of ``size`` bytes and rewrite the append-only file.

        Loading them back after a restart then takes a while (see ``key-load-delay``),
        during which the server answers every command with ``-LOADING``.
        """
        client = redis.Redis.from_url(self.url)
        try:
            pipe = client.pipeline(transaction=False)
            for i in range(keys):
                pipe.set(f"{prefix}:{i}", b"x" * size)
            pipe.execute()
            client.bgrewriteaof()
            wait_for(lambda: not _rewriting(client), "the append-only file rewrite")
        finally:
            client.close()


def slow_load(per_key_us: int) -> Sequence[str]:
    """Options that make a restarted server load each key slowly and answer meanwhile."""
    return (
        *("--key-load-delay", str(per_key_us)),
        *("--loading-process-events-interval-bytes", "1024"),
    )


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Until ``predicate()`` is true (fails the test after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _answers(client: redis.Redis, ready: bool) -> bool:
    try:
        return bool(client.ping())
    except redis.BusyLoadingError:
        return not ready
    except redis.RedisError:
        return False


def _rewriting(client: redis.Redis) -> bool:
    info = client.info("persistence")
    return bool(info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestartableRedis]:
    """A private redis-server that keeps its data across a restart (stopped at the end)."""
    one = RestartableRedis(tmp_path)
    one.start()
    yield one
    one.stop()
