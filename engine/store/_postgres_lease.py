"""The Postgres store's lease line: renewals from the lease keeper's thread.

The store's statements share an asyncio pool driven by the event loop; a renewal sent
there would wait for the loop to run. The keeper renews from a thread of its own
instead, on a blocking connection of its own: a batch of renewals is one ``UPDATE``
over the batch (``unnest`` of the run ids, tokens and ttls), whatever the event loop is
doing; only when some lease is refused does a second statement ask who holds those runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from phasegraph.errors import LeaseLostError
from phasegraph.store._open import lease_lost_error
from phasegraph.store._postgres_db import Blocking
from phasegraph.store._postgres_schema import Statements
from phasegraph.store.base import Lease, LeaseLine

__all__ = ["PostgresLeaseLine"]


@final
class PostgresLeaseLine(LeaseLine):
    """Renews leases with one statement per batch over a blocking connection.

    Args:
        conn: The blocking connection (connected on first use).
        sql: The store's statements.
    """

    def __init__(self, conn: Blocking, sql: Statements) -> None:
        self._conn = conn
        self._sql = sql

    def renew(self, leases: Sequence[Lease]) -> list[Lease | LeaseLostError]:
        """Renew every lease in one statement; see :meth:`LeaseLine.renew`."""
        params = (
            [lease.run_id for lease in leases],
            [lease.token for lease in leases],
            [lease.ttl for lease in leases],
        )
        renewed = {
            run_id: expires for run_id, expires in self._conn.all(self._sql.renew_many, params)
        }
        outcomes: list[Lease | LeaseLostError] = []
        for lease in leases:
            expires_at = renewed.get(lease.run_id)
            if expires_at is None:
                holder = self._conn.all(self._sql.holder, (lease.run_id,))
                outcomes.append(lease_lost_error(lease, str(holder[0][0]) if holder else None))
            else:
                outcomes.append(
                    Lease(
                        run_id=lease.run_id,
                        owner=lease.owner,
                        token=lease.token,
                        expires_at=expires_at,
                        ttl=lease.ttl,
                    )
                )
        return outcomes

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
