"""A private three-primary Redis Cluster on loopback, for tests.

:func:`redis_cluster` starts three ``redis-server --cluster-enabled yes`` processes on
free ports of 127.0.0.1, joins them (each takes a third of the 16384 hash slots, then
they meet) and waits until every node reports ``cluster_state:ok`` and knows the others.
The cluster is made with plain cluster commands (``CLUSTER ADDSLOTSRANGE``, ``CLUSTER
MEET``), so it needs no ``redis-cli``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import redis

from phasegraph.errors import StoreUnavailableError
from phasegraph.testing._contract import started

__all__ = ["REDIS_CLUSTER_URL_ENV", "redis_cluster"]

REDIS_CLUSTER_URL_ENV: Final = "PHASEGRAPH_TEST_REDIS_CLUSTER_URL"
"""Environment variable naming a Redis Cluster the tests may use instead of starting one."""

_NODES: Final = 3
_SLOTS: Final = 16384
_READY_WITHIN: Final = 30.0  # seconds for the nodes to start and agree on the slots


@contextlib.contextmanager
def redis_cluster() -> Iterator[str]:
    """Yield the ``redis+cluster://`` URL of a Redis Cluster of three primaries.

    Uses ``$PHASEGRAPH_TEST_REDIS_CLUSTER_URL`` when set; otherwise starts three
    ``redis-server`` processes with persistence off, in a temporary directory, and kills
    them on exit.

    Raises:
        StoreUnavailableError: Neither works; the message says how to fix it. Tests that
            need a cluster then fail, never skip.
    """
    configured = os.environ.get(REDIS_CLUSTER_URL_ENV)
    if configured:
        _check_configured(configured)
        yield configured
        return
    exe = shutil.which("redis-server")
    if exe is None:
        raise StoreUnavailableError(
            f"the cluster tests need Redis: set {REDIS_CLUSTER_URL_ENV} to a cluster node's "
            "URL, or install redis-server 7 or later (e.g. apt-get install redis-server)"
        )
    with tempfile.TemporaryDirectory(prefix="phasegraph-cluster-") as workdir:
        processes: list[subprocess.Popen[bytes]] = []
        try:
            ports = _start_nodes(exe, workdir, processes)
            _join(ports, workdir)
            yield f"redis+cluster://127.0.0.1:{ports[0][0]}/0"
        finally:
            for process in processes:
                process.kill()  # throwaway servers with nothing to save
            for process in processes:
                process.wait()


def _start_nodes(
    exe: str, workdir: str, processes: list[subprocess.Popen[bytes]]
) -> list[tuple[int, int]]:
    """Start the nodes; returns each one's (client port, cluster bus port)."""
    ports: list[tuple[int, int]] = []
    for _ in range(_NODES):
        for _attempt in range(3):  # another process may grab a free port first
            port, bus = _free_ports(2)
            process = _start_node(exe, workdir, port, bus)
            if started(process, f"redis://127.0.0.1:{port}/0"):
                processes.append(process)
                ports.append((port, bus))
                break
            process.kill()
            process.wait()
        else:
            raise StoreUnavailableError(
                f"redis-server ({exe}) did not start in cluster mode; see logs in {workdir}"
            )
    return ports


def _start_node(exe: str, workdir: str, port: int, bus: int) -> subprocess.Popen[bytes]:
    argv = [
        *(exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir),
        *("--cluster-enabled", "yes", "--cluster-port", str(bus)),
        *("--cluster-config-file", f"nodes-{port}.conf"),
        *("--save", "", "--appendonly", "no"),
    ]
    with open(os.path.join(workdir, f"redis-{port}.log"), "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=log)


def _join(ports: list[tuple[int, int]], workdir: str) -> None:
    """Give each node a third of the slots, have them meet, wait until all agree."""
    clients = [_client(port) for port, _ in ports]
    try:
        for i, client in enumerate(clients):
            first, last = i * _SLOTS // _NODES, (i + 1) * _SLOTS // _NODES - 1
            # Distinct epochs up front, as redis-cli does: no collision to resolve later.
            _command(client, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            _command(client, "CLUSTER", "ADDSLOTSRANGE", first, last)
        for port, bus in ports[1:]:
            _command(clients[0], "CLUSTER", "MEET", "127.0.0.1", port, bus)
        deadline = time.monotonic() + _READY_WITHIN
        while not all(_ready(client) for client in clients):
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"the Redis Cluster on ports {[p for p, _ in ports]} did not reach "
                    f"cluster_state:ok within {_READY_WITHIN:g} s; see logs in {workdir}"
                )
            time.sleep(0.05)
    except redis.RedisError as exc:
        raise StoreUnavailableError(
            f"could not form a Redis Cluster (Redis 7 or later is needed): {exc}; "
            f"see logs in {workdir}"
        ) from None
    finally:
        for client in clients:
            client.close()


def _check_configured(url: str) -> None:
    """Refuse a configured cluster URL whose node does not answer or is not serving."""
    scheme, _, node = url.partition("+cluster")  # the node's own URL: redis://, rediss://
    client = redis.Redis.from_url(scheme + node, socket_connect_timeout=5, socket_timeout=5)
    try:
        state = _cluster_info(client).get("cluster_state")
    except redis.RedisError as exc:
        raise StoreUnavailableError(f"{REDIS_CLUSTER_URL_ENV}: {exc}") from None
    finally:
        client.close()
    if state != "ok":
        raise StoreUnavailableError(f"{REDIS_CLUSTER_URL_ENV}: cluster_state is {state!r}")


def _ready(client: redis.Redis) -> bool:
    """Whether the node sees every slot served and knows every node."""
    fields = _cluster_info(client)
    return fields.get("cluster_state") == "ok" and fields.get("cluster_known_nodes") == str(_NODES)


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    info = _command(client, "CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def _command(client: redis.Redis, *args: str | int) -> Any:
    """One raw command (redis-py leaves ``execute_command`` untyped)."""
    send: Callable[..., Any] = client.execute_command
    return send(*args)


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=5)


def _free_ports(count: int) -> list[int]:
    """Ports free right now on 127.0.0.1 (held open together, so they differ)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
