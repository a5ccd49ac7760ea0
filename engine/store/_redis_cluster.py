"""The Redis store's commands on a Redis Cluster, through redis-py's cluster client.

A ``redis+cluster://HOST:PORT`` (or ``rediss+cluster://``) URL names any one node of the
cluster; redis-py learns the others and which slots each serves, sends every command to
the primary of its key's slot and follows ``MOVED`` and ``ASK`` redirections when slots
move. Every command the store sends names keys of one slot (a run's keys share the hash
tag ``{run_id}``), so none is refused as cross-slot; the global run index is in a slot of
its own and is written with commands of its own (see :mod:`phasegraph.store.redis`).

:class:`ClusterLink` keeps the contract of the standalone store's wire: replies come back
as they are, an error reply as a :data:`~phasegraph.store._redis_wire.ReplyError` value,
and a node or cluster that cannot answer raises :class:`ConnectionError` (so the store
retries a commit and reports the URL it could not reach).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Final, final

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)

from phasegraph.store._redis_scripts import COMMIT, SCRIPT_SHA
from phasegraph.store._redis_wire import Arg, ReplyError

__all__ = ["CLUSTER_SCHEMES", "ClusterLink", "cluster_client", "is_cluster_url", "node_url"]

CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""The cluster URL schemes, and the scheme of one node's URL (what redis-py reads)."""

# Commands in flight at once: redis-py's cluster client refuses a command (it does not
# wait) when a node's pool of connections is used up, so stay below it.
_IN_FLIGHT: Final = 64
_NODE_CONNECTIONS: Final = 100
# Refusals that mean "not now" (the cluster is failing over, a slot is migrating): the
# caller treats them like a broken connection.
_NOT_NOW: Final = (ClusterDownError, TryAgainError)
# What the cluster client raises when a command fails. AttributeError too: redis-py can
# close a connection that another command is opening (after a node failed), and that
# command then meets the connection's missing socket.
_FAILURES: Final = (RedisError, RedisClusterException, AttributeError)


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """A cluster URL with its node's plain scheme (``redis://``, ``rediss://``)."""
    scheme, sep, rest = url.partition("://")
    return CLUSTER_SCHEMES.get(scheme.lower(), scheme) + sep + rest


def cluster_client(url: str, **defaults: Any) -> RedisCluster:
    """A redis-py asyncio cluster client for a cluster URL (its options override ``defaults``).

    A ``MOVED`` reply only repoints its slot (redis-py would otherwise drop every
    connection, those of commands in flight too, after every fifth one). Nothing connects
    until the first command.
    """
    return RedisCluster.from_url(node_url(url), **{"reinitialize_steps": 0, **defaults})


@final
class ClusterLink:
    """The store's commands on a Redis Cluster.

    Args:
        url: The ``redis+cluster://`` or ``rediss+cluster://`` URL.
        connect_timeout: Seconds to wait for a connection to a node (unless the URL says).
        timeout: Seconds to wait for a reply (unless the URL says).
        commit_keys: The keys the commit script gets for a run.
        index: The global run index's key (a sorted set in a slot of its own).
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float,
        timeout: float,
        commit_keys: Callable[[str], Sequence[str]],
        index: str,
    ) -> None:
        self._client = cluster_client(
            url,
            decode_responses=False,
            protocol=2,  # replies as the standalone wire reads them, whatever redis-py's default
            socket_connect_timeout=connect_timeout,
            socket_timeout=timeout,
            max_connections=_NODE_CONNECTIONS,
            # No retry after a connection error: the command may have run (an acquire is
            # not idempotent); the store retries what may be retried (commits).
            retry=Retry(NoBackoff(), 0),
        )
        self._commit_keys = commit_keys
        self._index = index
        self._in_flight = asyncio.Semaphore(_IN_FLIGHT)
        self._mapping = asyncio.Lock()

    async def commit(self, run_id: str, seq: int, updated_at: float, args: Sequence[Arg]) -> Any:
        """The commit script on the run's slot, and the run's index entry in its own slot.

        Each command may be sent again when the caller retries after a connection error
        (the commit is idempotent, the index writes too). The reply is the script's, or
        the first error reply of the three commands.
        """
        listed = 0
        if seq == 0:
            # Listed before it exists, so a crash after the commit cannot leave it unlisted.
            # NX: a refused seq 0 (the id is taken) never moves a listed run's score.
            (listed,) = await self.call_many([("ZADD", self._index, "NX", updated_at, run_id)])
            if isinstance(listed, ReplyError):
                return listed
        reply = await self.eval(COMMIT, self._commit_keys(run_id), args)
        # Written (now or before), and not just listed with this very score.
        if not isinstance(reply, ReplyError) and int(reply[0]) > 0 and listed != 1:
            (moved,) = await self.call_many([("ZADD", self._index, updated_at, run_id)])
            if isinstance(moved, ReplyError):
                return moved
        return reply

    async def eval(self, script: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run a script by its digest on the node of its keys' slot."""
        async with self._in_flight:
            try:
                client = await self._mapped()
                try:
                    return await client.execute_command(
                        "EVALSHA", SCRIPT_SHA[script], len(keys), *keys, *args
                    )
                except NoScriptError:
                    # That node has not run it yet (new, restarted, flushed): EVAL runs it
                    # and keeps it, so the next EVALSHA there finds it.
                    return await client.execute_command("EVAL", script, len(keys), *keys, *args)
            except _FAILURES as exc:
                return _refusal(exc)

    async def call_many(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Plain commands, each sent to the node of its key; replies in order."""
        if not commands:
            return []
        async with self._in_flight:
            try:
                client = await self._mapped()
                if len(commands) == 1:
                    return [await client.execute_command(*commands[0])]
                # One pipeline: the commands are grouped by node, one write to each.
                pipe = client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
            except _FAILURES as exc:
                return [_refusal(exc)] * len(commands)
        return [_refusal(r) if isinstance(r, BaseException) else r for r in replies]

    async def aclose(self) -> None:
        """Close every connection to every node."""
        await self._client.aclose()

    async def _mapped(self) -> RedisCluster:
        """The client, once it knows which node serves which slot.

        redis-py routes a command it starts before it has a slot map (the first ones, or
        after a failure dropped the map) to any node, and each then meets ``MOVED``:
        commands wait here while one of them reads the map.
        """
        client = self._client
        if client.get_default_node() is None:
            async with self._mapping:
                if client.get_default_node() is None:
                    await client.initialize()
        return client


def _refusal(exc: BaseException) -> Exception:
    """An error reply as a value; anything else means the cluster cannot answer now.

    Raises:
        ConnectionError: A node is unreachable or the cluster is failing over (or any
            failure that is not the server refusing the command).
    """
    if isinstance(exc, ResponseError) and not isinstance(exc, _NOT_NOW):
        return ReplyError(str(exc))
    raise ConnectionError(str(exc) or type(exc).__name__) from exc
