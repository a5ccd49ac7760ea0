"""The Postgres store's tables and statements: SQL text only (no driver, no I/O).

Every table lives in one Postgres schema (``phasegraph`` unless the URL names another),
and every statement names it, so no statement depends on a session's ``search_path``:
the store works the same behind a transaction-mode pooler, where a session setting does
not outlive its transaction. The statements are built once per store, as bytes.

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``schema_version``):

* ``runs``: one row per run id — metadata, head seq (-1 while only a lease was taken),
  ``listed`` (``updated_at`` cut to the minute, which the listing indexes, so a step
  leaves the indexes alone unless its minute or status changed and the row's update
  stays a heap-only one), the lease (owner, last token issued, expiry) and the
  retention expiry of a finished run;
* ``records``: one row per step, its record (``bytea``), keyed by ``(run_id, seq)``;
* ``snapshots``: one row per snapshotted step, its snapshot (``bytea``);
* ``work``: the workers' queue, one row per request to drive a run (taken with
  ``FOR UPDATE SKIP LOCKED``, deleted once done);
* ``due``: the next deadline of each waiting or parked run (ms since the epoch);
* ``inbox`` and ``cancels``: replies and cancel requests for runs a worker is driving;
* ``definitions`` (since version 2): one row per run definition, its bytes (``bytea``)
  under their digest; shared by runs, so retention's sweep never deletes one;
* ``messages`` and ``messages_taken`` (since version 3): the runs' inboxes, one row per
  message keyed by ``(run_id, position)`` with its sender's id unique per run, and each
  run's cursor (how many it took); retention's sweep deletes a run's with the run;
* ``streams`` (since version 4): batches of live events of a durable stream's turns in
  flight, one row each, deleted once they are folded into committed steps (and by
  retention's sweep with the run).

Lease and queue times are the server's clock (:data:`NOW`), which every host sharing
the database agrees on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from phasegraph.store._open import POSTGRES_SCHEMA

__all__ = [
    "DEFAULT_SCHEMA",
    "NOW",
    "SCHEMA_VERSION",
    "Statements",
    "migration_lock",
    "migrations",
]

SCHEMA_VERSION: Final = 4
"""The layout this phasegraph writes; a newer one is refused, never written."""

DEFAULT_SCHEMA: Final = POSTGRES_SCHEMA
"""The Postgres schema the tables live in unless the store URL names another."""

NOW: Final = "extract(epoch FROM clock_timestamp())::float8"
"""The server's clock, in seconds since the epoch."""

# Version 1, whole. Every later version appends a list of statements that take the
# previous layout to it; a store at version N runs the lists after N, in one transaction.
_V1: Final = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE {s}.schema_version (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        version integer NOT NULL
    )""",
    """CREATE TABLE {s}.runs (
        run_id text PRIMARY KEY,
        graph text,
        status text,
        seq bigint NOT NULL DEFAULT -1,
        created_at float8,
        updated_at float8,
        listed float8,
        lease_owner text,
        lease_token bigint NOT NULL DEFAULT 0,
        lease_expires float8 NOT NULL DEFAULT 0,
        expires_at float8
    ) WITH (fillfactor = 70)""",
    "CREATE INDEX runs_listed ON {s}.runs (listed DESC NULLS LAST)",
    "CREATE INDEX runs_status ON {s}.runs (status, listed DESC NULLS LAST)",
    "CREATE INDEX runs_expiring ON {s}.runs (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE {s}.records (
        run_id text NOT NULL,
        seq bigint NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    """CREATE TABLE {s}.snapshots (
        run_id text NOT NULL,
        seq bigint NOT NULL,
        snapshot bytea NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    """CREATE TABLE {s}.work (
        id bigserial PRIMARY KEY,
        run_id text NOT NULL,
        consumer text,
        beat float8,
        deliveries integer NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX work_run ON {s}.work (run_id)",
    "CREATE TABLE {s}.due (run_id text PRIMARY KEY, due_ms bigint NOT NULL)",
    "CREATE INDEX due_at ON {s}.due (due_ms)",
    """CREATE TABLE {s}.inbox (
        id bigserial PRIMARY KEY,
        run_id text NOT NULL,
        reply text NOT NULL
    )""",
    "CREATE INDEX inbox_run ON {s}.inbox (run_id, id)",
    "CREATE TABLE {s}.cancels (run_id text PRIMARY KEY, request text NOT NULL)",
    "INSERT INTO {s}.schema_version (version) VALUES (1)",
)

# Version 2: run definitions, kept once per content (the key is the body's digest).
_V2: Final = (
    """CREATE TABLE {s}.definitions (
        key text PRIMARY KEY,
        body bytea NOT NULL
    )""",
)

# Version 3: the runs' inboxes.
_V3: Final = (
    """CREATE TABLE {s}.messages (
        run_id text NOT NULL,
        position int8 NOT NULL,
        id text NOT NULL,
        body bytea NOT NULL,
        at float8 NOT NULL,
        PRIMARY KEY (run_id, position),
        UNIQUE (run_id, id)
    )""",
    """CREATE TABLE {s}.messages_taken (
        run_id text PRIMARY KEY,
        position int8 NOT NULL
    )""",
)

# Version 4: durable live streams (batches of live events of turns in flight).
_V4: Final = (
    """CREATE TABLE {s}.streams (
        id bigserial PRIMARY KEY,
        run_id text NOT NULL,
        batch bytea NOT NULL
    )""",
    "CREATE INDEX streams_run ON {s}.streams (run_id, id)",
)

_STEPS: Final = {1: _V1, 2: _V2, 3: _V3, 4: _V4}


def migrations(schema: str, version: int) -> list[bytes]:
    """The statements taking ``schema`` from ``version`` (0: nothing yet) to the current one.

    Plain DDL, run in one transaction: never ``CREATE INDEX CONCURRENTLY``, which cannot
    run inside one.
    """
    steps = [step for number, step in sorted(_STEPS.items()) if number > version]
    out = [text.format(s=_quoted(schema)).encode() for step in steps for text in step]
    if steps:  # version 1 records itself as 1: any later step moves the version on
        update = f"UPDATE {{s}}.schema_version SET version = {SCHEMA_VERSION}"
        out.append(_format(schema, update))
    return out


def migration_lock(schema: str) -> int:
    """The advisory lock key that serializes migrations of ``schema`` (a stable 63-bit hash).

    The same for every phasegraph version (the key version 1 used), so that processes of
    two versions first opening one schema at once wait for one another too.
    """
    import zlib  # here: needed only when a store is first opened

    # "| 1" was "| SCHEMA_VERSION" while that was 1: kept, so versions share the key
    return zlib.crc32(f"phasegraph schema {schema}".encode()) << 16 | 1


def _quoted(schema: str) -> str:
    return f'"{schema}"'


def _format(schema: str, text: str) -> bytes:
    return text.replace("{s}", _quoted(schema)).replace("{now}", NOW).encode()


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the store and its queue, for one schema.

    Parameters are positional (``%s``; ``%b`` for payloads, sent as binary ``bytea``).
    """

    version: bytes
    commit: bytes
    commit_snapshot: bytes
    refused: bytes
    record_at: bytes
    last_record: bytes
    acquire: bytes
    lease_of: bytes
    renew: bytes
    renew_many: bytes
    release: bytes
    holder: bytes
    read_meta: bytes
    read_body: bytes
    records_from: bytes
    list_all: bytes
    list_status: bytes
    sweep: bytes
    enqueue: bytes
    queued: bytes
    append_stream: bytes
    read_stream: bytes
    drop_stream: bytes
    take: bytes
    reclaim: bytes
    stale: bytes
    claim: bytes
    touch: bytes
    ack: bytes
    move_due: bytes
    schedule: bytes
    unschedule: bytes
    deadline: bytes
    post_reply: bytes
    replies: bytes
    replies_done: bytes
    request_cancel: bytes
    cancel_requested: bytes
    cancel_done: bytes
    pending: bytes
    put_definition: bytes
    get_definition: bytes
    has_definition: bytes
    post_message: bytes
    message_by_id: bytes
    messages: bytes
    messages_after: bytes
    take_messages: bytes
    channel: str

    @classmethod
    def of(cls, schema: str) -> Statements:
        """The statements for the tables in ``schema`` (a name :data:`SCHEMA_NAME` accepts)."""
        channel = f"{schema}_work"
        texts = {name: text.replace("{channel}", f"'{channel}'") for name, text in _SQL.items()}
        return cls(channel=channel, **{name: _format(schema, text) for name, text in texts.items()})


_LIVE: Final = "(expires_at IS NULL OR expires_at > {now})"  # retention: expired runs are gone
# The commit: one statement, so one transaction and one round trip. The head moves only
# if the lease's token is the run's current one and the seq follows the head; the record
# (and snapshot) are written only if it moved. A run that finishes under a retention
# expiry gets its expiry (seconds from now), any other status none.
_HEAD: Final = """
WITH head AS (
  UPDATE {s}.runs SET seq = %s, graph = %s, status = %s, created_at = %s, updated_at = %s,
    listed = %s, expires_at = {now} + %s, lease_expires = {now} + %s
  WHERE run_id = %s AND lease_token = %s AND lease_owner IS NOT NULL AND seq = %s
  RETURNING run_id
), record AS (
  INSERT INTO {s}.records (run_id, seq, record) SELECT run_id, %s, %b FROM head
)"""
_SQL: Final = {
    "version": "SELECT version FROM {s}.schema_version",
    "commit": _HEAD + "\nSELECT count(*) FROM head",
    "commit_snapshot": _HEAD
    + """, snapshot AS (
  INSERT INTO {s}.snapshots (run_id, seq, snapshot) SELECT run_id, %s, %b FROM head
)
SELECT count(*) FROM head""",
    "refused": "SELECT seq, lease_owner, lease_token, lease_expires > {now} "
    "FROM {s}.runs WHERE run_id = %s",
    "record_at": "SELECT record FROM {s}.records WHERE run_id = %s AND seq = %s",
    "last_record": "SELECT max(seq) FROM {s}.records WHERE run_id = %s",
    # A free lease (released, expired, or held by the token asked to take over) is taken
    # with the next token; a live one is left alone (no row returned).
    "acquire": """
INSERT INTO {s}.runs AS r (run_id, lease_owner, lease_token, lease_expires)
VALUES (%s, %s, 1, {now} + %s)
ON CONFLICT (run_id) DO UPDATE SET lease_owner = excluded.lease_owner,
  lease_token = r.lease_token + 1, lease_expires = excluded.lease_expires
WHERE r.lease_owner IS NULL OR r.lease_expires <= {now} OR r.lease_token = %s
RETURNING lease_token, lease_expires""",
    "lease_of": "SELECT lease_owner, lease_token, lease_expires FROM {s}.runs "
    "WHERE run_id = %s AND lease_owner IS NOT NULL",
    # The token fences, not the clock: a lapsed lease nobody took over is still ours.
    "renew": "UPDATE {s}.runs SET lease_expires = {now} + %s "
    "WHERE run_id = %s AND lease_token = %s AND lease_owner IS NOT NULL RETURNING lease_expires",
    "renew_many": """
UPDATE {s}.runs AS r SET lease_expires = {now} + l.ttl
FROM unnest(%s::text[], %s::int8[], %s::float8[]) AS l(run_id, token, ttl)
WHERE r.run_id = l.run_id AND r.lease_token = l.token AND r.lease_owner IS NOT NULL
RETURNING r.run_id, r.lease_expires""",
    "release": "UPDATE {s}.runs SET lease_owner = NULL WHERE run_id = %s AND lease_token = %s",
    "holder": "SELECT lease_owner FROM {s}.runs "
    "WHERE run_id = %s AND lease_owner IS NOT NULL AND lease_expires > {now}",
    # The head and the seq of the last record, in one statement (one snapshot of both).
    "read_meta": "SELECT graph, status, seq, created_at, updated_at, "
    "(SELECT max(seq) FROM {s}.records WHERE run_id = %s) "
    f"FROM {{s}}.runs WHERE run_id = %s AND seq >= 0 AND {_LIVE}",
    "read_body": """
WITH snap AS (
  SELECT seq, snapshot FROM {s}.snapshots WHERE run_id = %s AND seq <= %s
  ORDER BY seq DESC LIMIT 1
)
SELECT seq, snapshot FROM snap
UNION ALL
SELECT seq, record FROM {s}.records
WHERE run_id = %s AND seq > (SELECT seq FROM snap) AND seq <= %s
ORDER BY 1""",
    "records_from": "SELECT seq, record FROM {s}.records "
    "WHERE run_id = %s AND seq >= %s AND seq < %s ORDER BY seq LIMIT %s",
    # Each listed run's last record too: a run whose journal does not end at its head is
    # listed as unreadable, as a read of it would refuse it.
    "list_all": "SELECT run_id, graph, status, seq, created_at, updated_at, "
    "(SELECT max(r.seq) FROM {s}.records r WHERE r.run_id = runs.run_id) FROM {s}.runs "
    f"WHERE listed IS NOT NULL AND {_LIVE} "
    "ORDER BY listed DESC NULLS LAST, updated_at DESC, run_id LIMIT %s OFFSET %s",
    "list_status": "SELECT run_id, graph, status, seq, created_at, updated_at, "
    "(SELECT max(r.seq) FROM {s}.records r WHERE r.run_id = runs.run_id) FROM {s}.runs "
    f"WHERE status = %s AND listed IS NOT NULL AND {_LIVE} "
    "ORDER BY listed DESC NULLS LAST, updated_at DESC, run_id LIMIT %s OFFSET %s",
    # Retention: runs whose expiry passed go whole (runs row, records, snapshots), a
    # batch at a time; rows another transaction holds are left for the next sweep.
    "sweep": """
WITH gone AS (
  DELETE FROM {s}.runs WHERE run_id IN (
    SELECT run_id FROM {s}.runs WHERE expires_at <= {now} LIMIT 100 FOR UPDATE SKIP LOCKED
  ) RETURNING run_id
), records AS (
  DELETE FROM {s}.records WHERE run_id IN (SELECT run_id FROM gone)
), snapshots AS (
  DELETE FROM {s}.snapshots WHERE run_id IN (SELECT run_id FROM gone)
), messages AS (
  DELETE FROM {s}.messages WHERE run_id IN (SELECT run_id FROM gone)
), taken AS (
  DELETE FROM {s}.messages_taken WHERE run_id IN (SELECT run_id FROM gone)
), streams AS (
  DELETE FROM {s}.streams WHERE run_id IN (SELECT run_id FROM gone)
)
SELECT count(*) FROM gone""",
    # -- the work queue (NOTIFY is delivered when the statement's transaction commits)
    "enqueue": "WITH e AS (INSERT INTO {s}.work (run_id) VALUES (%s) RETURNING id) "
    "SELECT pg_notify({channel}, '') FROM e",
    "queued": "SELECT EXISTS (SELECT 1 FROM {s}.work WHERE run_id = %s)",
    "take": """
UPDATE {s}.work SET consumer = %s, beat = {now}, deliveries = deliveries + 1
WHERE id IN (
  SELECT id FROM {s}.work WHERE consumer IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, run_id, deliveries""",
    "reclaim": """
UPDATE {s}.work SET consumer = %s, beat = {now}, deliveries = deliveries + 1
WHERE id IN (
  SELECT id FROM {s}.work WHERE consumer IS NOT NULL AND beat < {now} - %s
  ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, run_id, deliveries""",
    "stale": "SELECT id, run_id, deliveries FROM {s}.work "
    "WHERE consumer IS NOT NULL AND consumer <> %s AND beat < {now} - %s ORDER BY id LIMIT %s",
    "claim": """
UPDATE {s}.work SET consumer = %s, beat = {now}, deliveries = deliveries + 1
WHERE id = ANY(%s::int8[]) AND beat < {now} - %s RETURNING id, run_id, deliveries""",
    "touch": "UPDATE {s}.work SET consumer = %s, beat = {now} WHERE id = ANY(%s::int8[])",
    "ack": "DELETE FROM {s}.work WHERE id = %s",
    "move_due": """
WITH moved AS (
  DELETE FROM {s}.due WHERE run_id IN (
    SELECT run_id FROM {s}.due WHERE due_ms <= (({now}) * 1000)::int8
    ORDER BY due_ms LIMIT %s FOR UPDATE SKIP LOCKED
  ) RETURNING run_id
), queued AS (
  INSERT INTO {s}.work (run_id) SELECT run_id FROM moved RETURNING id
), woken AS (
  SELECT pg_notify({channel}, '') FROM (SELECT 1 FROM queued LIMIT 1) AS any_moved
)
SELECT (SELECT count(*) FROM queued), (SELECT count(*) FROM woken),
  (SELECT min(due_ms) FROM {s}.due WHERE due_ms > (({now}) * 1000)::int8),
  (({now}) * 1000)::int8""",
    "schedule": "INSERT INTO {s}.due (run_id, due_ms) VALUES (%s, %s) "
    "ON CONFLICT (run_id) DO UPDATE SET due_ms = excluded.due_ms",
    "unschedule": "DELETE FROM {s}.due WHERE run_id = %s",
    "deadline": "SELECT due_ms FROM {s}.due WHERE run_id = %s",
    # A reply and its wake-up, in one statement: never one without the other.
    "post_reply": """
WITH posted AS (INSERT INTO {s}.inbox (run_id, reply) VALUES (%s, %s) RETURNING run_id),
queued AS (INSERT INTO {s}.work (run_id) SELECT run_id FROM posted RETURNING id)
SELECT pg_notify({channel}, '') FROM queued""",
    "replies": "SELECT reply FROM {s}.inbox WHERE run_id = %s ORDER BY id LIMIT %s",
    "replies_done": "DELETE FROM {s}.inbox WHERE id IN "
    "(SELECT id FROM {s}.inbox WHERE run_id = %s ORDER BY id LIMIT %s)",
    "request_cancel": """
WITH asked AS (
  INSERT INTO {s}.cancels (run_id, request) VALUES (%s, %s)
  ON CONFLICT (run_id) DO UPDATE SET request = excluded.request RETURNING run_id
), queued AS (INSERT INTO {s}.work (run_id) SELECT run_id FROM asked RETURNING id)
SELECT pg_notify({channel}, '') FROM queued""",
    "cancel_requested": "SELECT request FROM {s}.cancels WHERE run_id = %s",
    "cancel_done": "DELETE FROM {s}.cancels WHERE run_id = %s",
    "pending": "SELECT count(*) FROM {s}.work "
    "WHERE consumer IS NOT NULL AND (%s::text IS NULL OR consumer = %s)",
    # -- run definitions: kept once per digest, never deleted (runs share them)
    "put_definition": "INSERT INTO {s}.definitions (key, body) VALUES (%s, %b) "
    "ON CONFLICT (key) DO NOTHING",
    "get_definition": "SELECT body FROM {s}.definitions WHERE key = %s",
    "has_definition": "SELECT EXISTS (SELECT 1 FROM {s}.definitions WHERE key = %s)",
    # -- durable live streams: appended in batches, dropped once folded into steps
    "append_stream": "INSERT INTO {s}.streams (run_id, batch) VALUES (%s, %b)",
    "read_stream": "SELECT batch FROM {s}.streams WHERE run_id = %s ORDER BY id",
    "drop_stream": "DELETE FROM {s}.streams WHERE run_id = %s",
    # -- the runs' inboxes: a post that finds its id (or, in a race, its position) taken
    # inserts nothing; the caller then looks the id up, and tries again if it is not there
    "post_message": "INSERT INTO {s}.messages (run_id, position, id, body, at) "
    "SELECT %s, coalesce(max(position), 0) + 1, %s, %b, %s FROM {s}.messages "
    "WHERE run_id = %s ON CONFLICT DO NOTHING RETURNING position",
    "message_by_id": "SELECT position, body, at FROM {s}.messages WHERE run_id = %s AND id = %s",
    "messages": "SELECT position, id, body, at FROM {s}.messages WHERE run_id = %s "
    "AND position > coalesce((SELECT position FROM {s}.messages_taken WHERE run_id = %s), 0) "
    "ORDER BY position LIMIT %s",
    "messages_after": "SELECT position, id, body, at FROM {s}.messages "
    "WHERE run_id = %s AND position > %s ORDER BY position LIMIT %s",
    "take_messages": "INSERT INTO {s}.messages_taken AS t (run_id, position) "
    "SELECT %s, least(%s, coalesce(max(position), 0)) FROM {s}.messages WHERE run_id = %s "
    "ON CONFLICT (run_id) DO UPDATE SET position = greatest(t.position, excluded.position)",
}
