"""The Redis store's lease line: renewals from the lease keeper's thread, on redis-py.

The store's commands share one asyncio connection (one per primary on a cluster), so a
renewal sent there waits behind every commit queued before it and for the event loop to
run. The keeper renews from a thread of its own instead, on a blocking redis-py client of
its own (one connection to a server; one per primary on a Redis Cluster): a batch of
renewals is one pipeline of the lease script, whatever the event loop is doing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, final

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    NoScriptError,
    OutOfMemoryError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from phasegraph.errors import LeaseLostError, StoreError, StoreUnavailableError
from phasegraph.store._open import is_cluster_url, lease_lost_error, node_url
from phasegraph.store._redis_scripts import LEASE, SCRIPT_SHA, ms
from phasegraph.store._redis_wire import CONNECT_TIMEOUT, outage
from phasegraph.store.base import Lease, LeaseLine

__all__ = ["RedisLeaseLine", "lease_owner", "lease_reply", "ms"]

_TIMEOUT: Final = 5.0


@final
class RedisLeaseLine(LeaseLine):
    """Renews leases with the lease script over a blocking client of its own.

    Args:
        url: The store's URL (a server's, or any cluster node's with a cluster scheme).
        run_keys: The keys of a run (the lease and token keys are its fifth and sixth).
        where: The URL as messages show it (no password).
    """

    def __init__(self, url: str, run_keys: Callable[[str], tuple[str, ...]], where: str) -> None:
        self._url = url
        self._run_keys = run_keys
        self._where = where
        self._client: Redis | RedisCluster | None = None  # connected on first use

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        """Renew every lease in one pipeline; see :meth:`LeaseLine.renew`."""
        try:
            replies = self._send(leases)
            if any(isinstance(reply, NoScriptError) for reply in replies):
                # A new server, a restart or SCRIPT FLUSH: load it (on every primary) and
                # send again; a renewal is idempotent.
                self._connected().script_load(LEASE)
                replies = self._send(leases)
        except (RedisError, RedisClusterException, OSError) as exc:
            self.close()  # a fresh connection next time
            raise StoreUnavailableError(f"cannot reach Redis at {self._where}: {exc}") from exc
        return [self._outcome(lease, reply) for lease, reply in zip(leases, replies, strict=True)]

    def close(self) -> None:
        """Close the client's connections."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _send(self, leases: Sequence[Lease]) -> list[Any]:
        pipe = self._connected().pipeline(transaction=False)
        for lease in leases:
            keys = self._run_keys(lease.run_id)[4:6]
            args = ("renew", lease.token, ms(lease.ttl), lease.owner, b"")
            pipe.execute_command("EVALSHA", SCRIPT_SHA[LEASE], len(keys), *keys, *args)
        return list(pipe.execute(raise_on_error=False))

    def _outcome(self, lease: Lease, reply: Any) -> Lease | LeaseLostError:
        if isinstance(reply, ResponseError):
            # redis-py takes the code off the errors it has a class for: put it back (a
            # LOADING reply is a ConnectionError there, an outage already).
            code = "OOM " if isinstance(reply, OutOfMemoryError) else ""
            raise outage(self._where, f"{code}{reply}") or StoreError(
                f"Redis at {self._where} refused a lease renewal: {reply}"
            )
        if isinstance(reply, BaseException):
            raise StoreUnavailableError(f"cannot reach Redis at {self._where}: {reply}")
        token, held, _, now = lease_reply(reply)
        if not token:
            return lease_lost_error(lease, lease_owner(held) if held else None)
        return Lease(
            run_id=lease.run_id,
            owner=lease.owner,
            token=token,
            expires_at=now + lease.ttl,
            ttl=lease.ttl,
        )

    def _connected(self) -> Redis | RedisCluster:
        if self._client is None:
            options = {
                "socket_connect_timeout": CONNECT_TIMEOUT,
                "socket_timeout": _TIMEOUT,
                "protocol": 2,
            }  # the URL's own options override these
            if is_cluster_url(self._url):
                self._client = RedisCluster.from_url(node_url(self._url), **options)
            else:
                self._client = Redis.from_url(self._url, **options)
        return self._client


def lease_owner(lease_value: bytes) -> str:
    """The owner part of a stored lease value ``b"<token>:<owner>"``."""
    return lease_value.partition(b":")[2].decode(errors="replace")


def lease_reply(reply: Any) -> tuple[int, bytes, int, float]:
    """The lease script's reply: (token or 0, another holder's lease value, its pttl, now)."""
    return int(reply[0]), reply[1], int(reply[2]), int(reply[3]) + int(reply[4]) / 1e6
