"""Damage a run's journal behind each shipped store's back, as a hand edit or a bad disk would.

Each class is a :class:`~phasegraph.testing.JournalDamage` for one backend: the contract
suite's damaged-journal cases use them, and so do the tests that then run the CLI.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from builders import sqlite_db
from phasegraph.model import replace
from phasegraph.store.memory import MemoryStore
from phasegraph.store.redis import RedisStore
from postgres_kit import sql


class MemoryDamage:
    """Changes a :class:`MemoryStore`'s dicts directly."""

    def __init__(self, store: MemoryStore) -> None:
        self._runs = store._runs

    async def drop_last_record(self, run_id: str) -> None:
        """Delete the run's last step record; its metadata stays."""
        self._runs[run_id].records.pop()

    async def set_head(self, run_id: str, seq: int) -> None:
        """Write ``seq`` as the run's head in its metadata; its records stay."""
        run = self._runs[run_id]
        assert run.meta is not None
        run.meta = replace(run.meta, seq=seq)


class SqliteDamage:
    """Changes a SQLite store's file with SQL, on a connection of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _change(self, sql: str, *params: object) -> None:
        with sqlite_db(self.path) as conn:
            assert conn.execute(sql, params).rowcount == 1
        conn.close()

    async def drop_last_record(self, run_id: str) -> None:
        """Delete the run's last row of ``records``; ``runs.seq`` stays."""
        with sqlite_db(self.path) as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
        conn.close()
        if version < 3:  # keyed by (run_id, seq)
            self._change(
                "DELETE FROM records WHERE run_id = ? "
                "AND seq = (SELECT max(seq) FROM records WHERE run_id = ?)",
                run_id,
                run_id,
            )
            return
        # Keyed by num << 32 | seq: the run's rows are one key range.
        self._change(
            "DELETE FROM records WHERE key = (SELECT max(key) FROM records, runs "
            "WHERE run_id = ? AND key >= num << 32 AND key < (num + 1) << 32)",
            run_id,
        )

    async def set_head(self, run_id: str, seq: int) -> None:
        """Set ``runs.seq`` of the run; its records stay."""
        self._change("UPDATE runs SET seq = ? WHERE run_id = ?", seq, run_id)


class RedisDamage:
    """Changes a Redis store's keys with plain commands, on a server or a cluster.

    Args:
        store: The store whose keys to change (its prefix, its server or cluster).
    """

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self.client: Redis | RedisCluster = store.queue_client()

    async def drop_last_record(self, run_id: str) -> None:
        """Pop the run's last record off its list; the meta hash stays."""
        assert await self.client.rpop(self._store.run_keys(run_id)[1]) is not None

    async def set_head(self, run_id: str, seq: int) -> None:
        """Set the ``seq`` field of the run's meta hash; its records stay."""
        await self.client.hset(self._store.run_keys(run_id)[0], "seq", seq)

    async def aclose(self) -> None:
        """Close the client."""
        await self.client.aclose()


class PostgresDamage:
    """Changes a Postgres store's tables with SQL, on a connection of its own.

    Args:
        url: The store's URL (its schema in ``?schema=``).
    """

    def __init__(self, url: str) -> None:
        self.url = url

    async def drop_last_record(self, run_id: str) -> None:
        """Delete the run's last row of ``records``; ``runs.seq`` stays."""
        await asyncio.to_thread(
            sql,
            self.url,
            "DELETE FROM records WHERE run_id = %s "
            "AND seq = (SELECT max(seq) FROM records WHERE run_id = %s)",
            run_id,
            run_id,
        )

    async def set_head(self, run_id: str, seq: int) -> None:
        """Set ``runs.seq`` of the run; its records stay."""
        await asyncio.to_thread(
            sql, self.url, "UPDATE runs SET seq = %s WHERE run_id = %s", seq, run_id
        )
