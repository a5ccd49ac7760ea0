"""Burr's side of ``compare.py``: the same loop with no persister, SQLite and Redis.

The loop is an action ``step`` that adds 1 to ``i`` with a transition back to itself
while ``i < n`` and then to ``done``; the unchanged data is a state field ``blob``. A
persister is attached with ``with_state_persister``, which saves the whole state after
every action. The persisters are Burr's own: ``SQLitePersister`` (Python's ``sqlite3``
with SQLite's defaults: rollback journal, ``synchronous=FULL``, a commit per save) and
``RedisBasePersister`` on a plain redis-py client (no Redis modules needed; a save is
three round trips: EXISTS, HSET, ZADD). Applications are built before the clock starts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from bench_common import Case, Counted, Latency, Timed, latency, redis_bytes_in, wchar
from burr.core import Application, ApplicationBuilder, State, action, default, expr
from burr.core.persistence import BaseStatePersister, SQLitePersister
from burr.integrations.persisters.b_redis import RedisBasePersister

__all__ = ["Burr"]

SYSTEM = "Burr"
PARTITION = "bench"
TABLE = "burr_state"


@action(reads=["i"], writes=["i"])
def step(state: State) -> State:
    return state.update(i=state["i"] + 1)


@action(reads=[], writes=[])
def done(state: State) -> State:
    return state


class Burr:
    """Builds the Burr cases of each workload."""

    def __init__(self, tmp: Path, redis_url: str, prefix: str) -> None:
        self.db = tmp / "burr.db"
        self.sqlite = SQLitePersister(db_path=str(self.db), table_name=TABLE)
        self.sqlite.initialize()
        self.client = redis.Redis.from_url(redis_url)
        self.prefix = f"{prefix}-burr"
        self.redis = RedisBasePersister(redis.Redis.from_url(redis_url), namespace=self.prefix)

    def close(self) -> None:
        self.sqlite.cleanup()
        self.redis.cleanup()
        self.client.close()

    def _persister(self, store: str) -> BaseStatePersister | None:
        return {"SQLite": self.sqlite, "Redis": self.redis}.get(store)

    def _app(self, store: str, steps: int, blob: str) -> tuple[Application[Any], str]:
        app_id = uuid.uuid4().hex
        builder = (
            ApplicationBuilder()
            .with_actions(step=step, done=done)
            .with_transitions(("step", "step", expr(f"i < {steps}")), ("step", "done", default))
            .with_state(i=0, blob=blob)
            .with_entrypoint("step")
            .with_identifiers(app_id=app_id, partition_key=PARTITION)
        )
        persister = self._persister(store)
        if persister is not None:
            builder = builder.with_state_persister(persister)
        return builder.build(), app_id

    def _run(self, app: Application[Any], steps: int) -> None:
        _, _, state = app.run(halt_after=["done"])
        if state["i"] != steps:
            raise SystemExit(f"Burr loop ended at i={state['i']}")

    def _timed_loop(self, store: str, steps: int, blob: str) -> Timed:
        app, _ = self._app(store, steps, blob)
        started = time.perf_counter()
        self._run(app, steps)
        return Timed(time.perf_counter() - started, steps + 1)  # every step, then done

    def _counted_loop(self, store: str, steps: int, blob: str) -> Counted:
        app, app_id = self._app(store, steps, blob)
        written, net = wchar(), redis_bytes_in(self.client)
        self._run(app, steps)
        written, net = wchar() - written, redis_bytes_in(self.client) - net
        saves = steps + 1
        if store == "SQLite":
            return Counted(self._table_bytes(app_id) / saves, written / saves)
        if store == "Redis":
            return Counted(self._redis_bytes(app_id) / saves, net / saves)
        return Counted(None, None)

    def _table_bytes(self, app_id: str) -> int:
        (total,) = self.sqlite.connection.execute(
            f"SELECT coalesce(sum(length(state)), 0) FROM {TABLE} WHERE app_id = ?", (app_id,)
        ).fetchone()
        return int(total)

    def _redis_bytes(self, app_id: str) -> int:
        total = 0
        for key in self.client.scan_iter(match=f"{self.prefix}:{PARTITION}:{app_id}:*", count=1000):
            total += sum(len(k) + len(v) for k, v in self.client.hgetall(key).items())
        return total

    def loop_cases(self, steps: int, size: int) -> list[Case]:
        """The loop with no persister, SQLitePersister and RedisBasePersister."""
        blob = "x" * size
        stores = {"none": "memory", "SQLite": "SQLite", "Redis": "Redis"}
        names = {"none": "no persister", "SQLite": "SQLitePersister", "Redis": "RedisPersister"}
        return [
            Case(
                SYSTEM,
                names[store],
                run=lambda store=store: self._timed_loop(store, steps, blob),
                count=None
                if store == "none"
                else lambda store=store: self._counted_loop(store, steps, blob),
                peer=peer,
                note="rollback journal, synchronous=FULL" if store == "SQLite" else "",
            )
            for store, peer in stores.items()
        ]

    def resume(self, steps: int, repeat: int) -> list[Latency]:
        """Loading the head state, and every saved state, of a ``steps``-step app."""
        rows = []
        for store in ("SQLite", "Redis"):
            persister = self._persister(store)
            assert persister is not None
            app, app_id = self._app(store, steps, "")
            self._run(app, steps)
            saves = steps + 1

            def timed(call: Callable[[], Any]) -> float:
                started = time.perf_counter()
                call()
                return (time.perf_counter() - started) * 1e3

            def every(p: BaseStatePersister = persister, a: str = app_id, n: int = saves) -> None:
                for seq in range(n):
                    if p.load(PARTITION, a, seq) is None:
                        raise SystemExit(f"Burr lost state {seq} of {a}")

            head = [
                timed(lambda p=persister, a=app_id: p.load(PARTITION, a)) for _ in range(repeat)
            ]
            history = [timed(every) for _ in range(max(1, min(repeat, 3)))]
            name = f"{store}Persister"
            rows += [
                latency(
                    "resume at head",
                    SYSTEM,
                    name,
                    head,
                    peer=store,
                    note="persister.load(partition, app_id)",
                ),
                latency(
                    "history",
                    SYSTEM,
                    name,
                    history,
                    peer=store,
                    note=f"persister.load(..., seq) for each of {saves} saves (no list API)",
                ),
            ]
        return rows
