"""Run stores: the contract, checks shared by every backend, and ``open_store``.

A store is chosen by URL. The accepted forms are listed in :data:`ACCEPTED_URL_FORMS`;
:func:`open_store` only parses the URL and builds the backend (importing its module
lazily, so a SQLite user never imports ``redis``). No network I/O happens until the
store is first used (a TLS URL reads its certificate files at once), so a bad URL fails
fast and a reachable-but-down server fails on first use with
:class:`~phasegraph.errors.StoreUnavailableError`.

The helper functions below (``check_*`` and the ``*_error`` builders) are what every
backend uses to refuse bad calls and to word its refusals the same way; a third-party
backend may use them too.
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, cast
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from phasegraph._vocabulary import DEFAULT_STORE_URL, RunStatus
from phasegraph.errors import (
    InputError,
    JournalHeadError,
    LeaseHeldError,
    LeaseLostError,
    RunNotFoundError,
    SequenceConflictError,
)
from phasegraph.store._holder import owner_label
from phasegraph.store.base import Commit, Lease, Store

__all__ = [
    "ACCEPTED_URL_FORMS",
    "DEFAULT_STORE_URL",
    "FINISHED_STATUSES",
    "POSTGRES_SCHEMA",
    "check_commit",
    "check_page",
    "check_ttl",
    "is_cluster_url",
    "journal_head_error",
    "journal_head_problem",
    "lease_held_error",
    "lease_lost_error",
    "node_url",
    "open_store",
    "redact_url",
    "run_not_found_error",
    "sequence_conflict_error",
]

FINISHED_STATUSES: Final = frozenset(status.value for status in RunStatus if status.terminal)
"""Run statuses after which a run never changes again (retention may then expire it)."""

ACCEPTED_URL_FORMS: Final = (
    "memory://",
    "sqlite:///relative/path.db or sqlite:////absolute/path.db [?synchronous=normal|full]",
    "redis://[[user]:password@]host[:port][/db] [?prefix=pg&ttl=SECONDS]",
    "rediss://... (Redis over TLS, same options and ssl_ca_certs, ssl_cert_reqs, "
    "ssl_certfile, ssl_keyfile, ssl_check_hostname)",
    "unix:///path/to/redis.sock[?db=N&prefix=pg&ttl=SECONDS]",
    "redis+cluster://[[user]:password@]host[:port][/0] [?prefix=pg&ttl=SECONDS] "
    "(a Redis Cluster, by any one node; rediss+cluster:// over TLS)",
    "postgresql://[user[:password]@]host[:port]/database [?schema=phasegraph&ttl=SECONDS"
    "&pool=8] (postgres:// too; and libpq's sslmode, sslrootcert, sslcert, sslkey, "
    "connect_timeout, application_name, options, target_session_attrs, host, port, user, "
    "dbname)",
)
"""Human-readable list of the store URLs :func:`open_store` accepts."""

_SYNCHRONOUS: Final = ("normal", "full")
_USERINFO_PASSWORD: Final = re.compile(r"^([A-Za-z][\w+.-]*://[^/?#@:]*):[^/?#@]*@")
_QUERY_PASSWORD: Final = re.compile(r"([?&]password=)[^&#]*")
# Connection options the Redis store understands (everything else is refused, so a typo
# is reported instead of silently ignored); the TLS ones only on rediss:// URLs.
_REDIS_OPTIONS: Final = frozenset(
    {"db", "password", "username", "client_name", "socket_timeout", "socket_connect_timeout"}
)
_REDIS_TLS_OPTIONS: Final = frozenset(
    {"ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname"}
)
_CERT_REQS: Final = ("none", "optional", "required")
# libpq's connection parameters the Postgres store passes on (the URL's own options are
# refused if unknown, as for Redis); ``password`` too, masked in every message.
_LIBPQ_OPTIONS: Final = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "connect_timeout",
        "application_name",
        "options",
        "target_session_attrs",
        "host",
        "port",
        "user",
        "password",
        "dbname",
    }
)
POSTGRES_SCHEMA: Final = "phasegraph"
"""The Postgres schema a store's tables live in unless its URL names another."""
# A schema name the store writes into its statements as it is (quoted): plain lower case.
_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
_POSTGRES_CONNECT_TIMEOUT: Final = "5"  # seconds, unless the URL says otherwise
_POSTGRES_POOL: Final = 8  # connections a store's pool keeps at most, unless ?pool=N


def open_store(url: str, *, read_only: bool = False) -> Store:
    """Build the store a URL names, without connecting yet.

    Args:
        url: One of :data:`ACCEPTED_URL_FORMS`, e.g. :data:`DEFAULT_STORE_URL`.
        read_only: For callers that only read: a SQLite store then never writes its file
            or folder (so it can be read where they are read-only) and refuses writes.
            Reading a Redis or memory store writes nothing anyway.

    Returns:
        An unopened store; use it as ``async with store:``.

    Raises:
        InputError: The URL is malformed or names an unknown scheme; the message names
            the URL and lists the accepted forms.
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise _bad_url(url, "it has no scheme")
    scheme = scheme.lower()
    if scheme == "memory":
        return _open_memory(url)
    if scheme == "sqlite":
        return _open_sqlite(url, read_only)
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        return _open_redis(url)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(url)
    raise _bad_url(url, f"unknown scheme {scheme!r}")


def _open_memory(url: str) -> Store:
    if url.partition("://")[2]:
        raise _bad_url(url, "memory:// takes no path or options")
    return _backend("memory", "MemoryStore")()


def _open_sqlite(url: str, read_only: bool) -> Store:
    parts = urlsplit(url)
    if parts.netloc:
        raise _bad_url(url, f"unexpected host {parts.netloc!r} (use three slashes: sqlite:///)")
    # "sqlite:///a.db" → "a.db" (relative); "sqlite:////abs/a.db" → "/abs/a.db".
    path = unquote(parts.path[1:])
    if not path or path.endswith("/"):
        raise _bad_url(url, "it names no database file")
    options = _query(url, parts.query, allowed=frozenset({"synchronous"}))
    synchronous = options.get("synchronous", "normal").lower()
    if synchronous not in _SYNCHRONOUS:
        raise _bad_url(url, f"synchronous must be one of {', '.join(_SYNCHRONOUS)}")
    return _backend("sqlite", "SqliteStore")(
        Path(path), synchronous=synchronous, read_only=read_only
    )


def _open_redis(url: str) -> Store:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing the port is the validation
    except ValueError:
        raise _bad_url(url, "the port is not a number") from None
    if parts.scheme == "unix":
        if not parts.path:
            raise _bad_url(url, "unix:// needs a socket path")
    else:
        if not parts.hostname:
            raise _bad_url(url, "it names no host")
        if parts.path not in ("", "/") and not parts.path[1:].isdigit():
            raise _bad_url(url, f"the database {parts.path[1:]!r} is not a number")
    cluster = parts.scheme.endswith("+cluster")
    allowed = _REDIS_OPTIONS | {"prefix", "ttl"}
    if parts.scheme.startswith("rediss"):
        allowed |= _REDIS_TLS_OPTIONS
    options = _query(url, parts.query, allowed=allowed)
    if cluster and (parts.path.strip("/") not in ("", "0") or options.get("db", "0") != "0"):
        raise _bad_url(url, "a Redis Cluster has database 0 only")
    if options.get("ssl_cert_reqs", "required").lower() not in _CERT_REQS:
        raise _bad_url(url, f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
    prefix = options.pop("prefix", "pg")
    # Braces would change the hash tag that keeps each run's keys in one cluster slot.
    if not prefix or any(c in prefix for c in "{} \t\r\n"):
        raise _bad_url(url, "prefix must be non-empty, without braces or whitespace")
    ttl = _positive_seconds(url, options.pop("ttl", None))
    driver_url = urlunsplit(parts._replace(query=urlencode(options)))
    return _backend("redis", "RedisStore")(driver_url, prefix=prefix, ttl=ttl)


def _open_postgres(url: str) -> Store:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing the port is the validation
    except ValueError:
        raise _bad_url(url, "the port is not a number") from None
    options = _query(url, parts.query, allowed=_LIBPQ_OPTIONS | {"schema", "ttl", "pool"})
    if not parts.hostname and not options.get("host"):
        raise _bad_url(url, "it names no host (postgresql://HOST/DATABASE, or ?host=SOCKET_DIR)")
    if "/" in parts.path.strip("/"):
        raise _bad_url(url, f"the database name {parts.path[1:]!r} has a slash")
    schema = options.pop("schema", POSTGRES_SCHEMA)
    if not _SCHEMA_NAME.match(schema):
        raise _bad_url(
            url,
            f"schema {schema!r} is not a plain lower-case name (letters, digits, '_', "
            "at most 48, not starting with a digit)",
        )
    ttl = _positive_seconds(url, options.pop("ttl", None))
    pool = options.pop("pool", str(_POSTGRES_POOL))
    if not (pool.isascii() and pool.isdigit() and 1 <= int(pool) <= 1000):
        raise _bad_url(
            url, f"pool must be a whole number of connections from 1 to 1000, not {pool!r}"
        )
    options.setdefault("connect_timeout", _POSTGRES_CONNECT_TIMEOUT)
    password = parts.password or options.get("password") or None
    # %20 for a space, not "+": libpq decodes percent escapes only (options=-c%20...).
    query = urlencode(options, quote_via=quote)
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=query))
    return _backend("postgres", "PostgresStore")(
        conninfo,
        where=redact_url(url),
        password=unquote(password) if password else None,
        schema=schema,
        pool_size=int(pool),
        ttl=ttl,
    )


def _backend(module: str, name: str) -> Callable[..., Store]:
    """The store class of a backend module, imported only now.

    Imported by name so that this package depends on no backend: backends import the
    checks below from here, and must stay independent of each other (a SQLite user
    never imports redis, and memory never pulls in sqlite).
    """
    store_class = getattr(importlib.import_module(f"phasegraph.store.{module}"), name)
    return cast("Callable[..., Store]", store_class)


def _query(url: str, query: str, *, allowed: frozenset[str]) -> dict[str, str]:
    """Parse a query string, refusing unknown and repeated options."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _bad_url(url, f"cannot parse options {query!r}") from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if key not in allowed:
            raise _bad_url(url, f"unknown option {key!r} (known: {', '.join(sorted(allowed))})")
        if key in options:
            raise _bad_url(url, f"option {key!r} is given twice")
        options[key] = value
    return options


def _positive_seconds(url: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise _bad_url(url, f"ttl {text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise _bad_url(url, f"ttl must be a positive number of seconds, not {text!r}")
    return seconds


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return url.partition("://")[0].lower() in _CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """A Redis Cluster URL with its node's plain scheme (``redis://``, ``rediss://``)."""
    scheme, sep, rest = url.partition("://")
    return _CLUSTER_SCHEMES.get(scheme.lower(), scheme) + sep + rest


_CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def redact_url(url: str) -> str:
    """The URL with any password (in the user part or the options) masked, for messages."""
    url = _USERINFO_PASSWORD.sub(r"\1:***@", url, count=1)
    return _QUERY_PASSWORD.sub(r"\1***", url)


def _bad_url(url: str, why: str) -> InputError:
    forms = "\n  ".join(ACCEPTED_URL_FORMS)
    return InputError(f"bad store URL {redact_url(url)!r}: {why}; accepted forms:\n  {forms}")


# ----------------------------------------------------------------- shared backend checks


def check_ttl(ttl: float) -> None:
    """Refuse a lease duration that is not a positive number of seconds.

    Raises:
        InputError: ``ttl`` is not positive and finite.
    """
    if not math.isfinite(ttl) or ttl <= 0:
        raise InputError(f"a lease ttl must be a positive number of seconds, not {ttl!r}")


def check_commit(lease: Lease, commit: Commit) -> None:
    """Refuse a commit that is malformed whatever the store holds (before any I/O).

    Raises:
        InputError: The metadata names another run or seq, the seq is negative, or seq 0
            has no snapshot.
    """
    run_id = lease.run_id
    if commit.meta.run_id != run_id:
        raise InputError(
            f"commit metadata names run {commit.meta.run_id!r} but the lease is for {run_id!r}",
            run_id=run_id,
        )
    if commit.seq < 0 or commit.meta.seq != commit.seq:
        raise InputError(
            f"run {run_id!r}: commit seq {commit.seq} must be >= 0 and equal meta.seq "
            f"({commit.meta.seq})",
            run_id=run_id,
            seq=commit.seq,
        )
    if commit.seq == 0 and commit.snapshot is None:
        raise InputError(
            f"run {run_id!r}: the commit at seq 0 needs a snapshot", run_id=run_id, seq=0
        )


def check_page(limit: int, offset: int) -> None:
    """Refuse a negative ``limit`` or ``offset`` for ``list_runs``.

    Raises:
        InputError: Either is negative.
    """
    if limit < 0 or offset < 0:
        raise InputError(f"limit ({limit}) and offset ({offset}) must not be negative")


def lease_held_error(run_id: str, owner: str, expires_at: float) -> LeaseHeldError:
    """The error for an acquire refused because ``owner`` holds the run until ``expires_at``."""
    left = max(expires_at - time.time(), 0.0)
    return LeaseHeldError(
        f"run {run_id!r} is being written by {owner_label(owner)!r} "
        f"(its lease expires in {left:.1f} s)",
        run_id=run_id,
    )


def lease_lost_error(lease: Lease, holder: str | None) -> LeaseLostError:
    """The error for a lease that is no longer current; ``holder`` is who has it now."""
    now = (
        f"{owner_label(holder)!r} holds it now"
        if holder
        else "it was released, or another holder took the run and let it lapse"
    )
    return LeaseLostError(
        f"run {lease.run_id!r}: lease of {owner_label(lease.owner)!r} (token {lease.token}) "
        f"is lost; {now}",
        holder=holder,
        run_id=lease.run_id,
    )


def sequence_conflict_error(run_id: str, seq: int, head: int) -> SequenceConflictError:
    """The error for a commit at ``seq`` that is not the successor of ``head``."""
    wanted = "0 (new run)" if head < 0 else str(head + 1)
    why = "a different step is already stored there" if seq <= head else f"expected {wanted}"
    return SequenceConflictError(
        f"run {run_id!r}: cannot commit seq {seq} (head is {head}; {why})",
        run_id=run_id,
        seq=seq,
    )


def journal_head_problem(head: int, last: int) -> str:
    """How a run's journal fails to end at its head, e.g. ``its head is seq 4 but ...``.

    Args:
        head: The head seq the run's metadata names.
        last: The seq of the last step record stored (-1: none is); not ``head``.
    """
    if last < head:
        ends = "holds no step record" if last < 0 else f"ends at seq {last}"
        return f"its head is seq {head} but its journal {ends} ({_seqs(last + 1, head)} missing)"
    past = f"{_seqs(head + 1, last)} past the head"
    return f"its head is seq {head} but its journal goes on to seq {last} ({past})"


def journal_head_error(run_id: str, head: int, last: int) -> JournalHeadError:
    """The error for a run whose last stored step record is not at its ``head``.

    Every read of a run checks its head this way, before it returns anything, so a
    damaged run is neither shown short nor continued from an earlier step.

    Args:
        run_id: The run.
        head: The head seq the run's metadata names.
        last: The seq of the last step record stored (-1: none is).
    """
    return JournalHeadError(
        f"run {run_id!r}: {journal_head_problem(head, last)}; the store was changed outside "
        "phasegraph or damaged, so "
        "the run is refused and nothing was re-run or overwritten: restore the store from a "
        "backup",
        run_id=run_id,
        seq=head,
        last_stored=last,
    )


def _seqs(first: int, last: int) -> str:
    """The step records ``first`` to ``last``, as a subject: 'the step record at seq 4 is'."""
    if first == last:
        return f"the step record at seq {first} is"
    return f"the step records at seqs {first} to {last} are"


def run_not_found_error(run_id: str, *, seq: int | None = None, head: int = -1) -> RunNotFoundError:
    """The error for an unknown run, or (with ``seq``) a seq the run does not have."""
    if seq is None or head < 0:
        return RunNotFoundError(f"no run {run_id!r} in this store", run_id=run_id)
    return RunNotFoundError(
        f"run {run_id!r} has no seq {seq} (head is {head})", run_id=run_id, seq=seq
    )
