"""Postgres for tests: a database of the session's own, a schema per test, a private server.

The suite reaches Postgres through ``$PHASEGRAPH_TEST_POSTGRES_URL`` (default
:data:`DEFAULT_ADMIN_URL`), a connection allowed to create databases. Each test session
(each xdist worker) creates ``phasegraph_test_<random>`` there and drops it at the end;
each test uses a schema of its own in it (:func:`isolated_postgres_url`), dropped
afterwards. Without a Postgres the tests that need one skip, but fail under ``CI=true``.

:class:`RestartablePostgres` is a throwaway cluster (``initdb`` in a temporary folder, a
free port) for the tests that kill or restart the server: the shared one is never
stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from builders import free_port

POSTGRES_URL_ENV = "PHASEGRAPH_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
_BIN = Path("/usr/lib/postgresql")


def _missing(why: str) -> None:
    """Fail under CI, skip elsewhere: a developer without Postgres still runs the rest."""
    message = (
        f"the Postgres tests need a server: {why} (set {POSTGRES_URL_ENV} to an admin URL, "
        f"default {DEFAULT_ADMIN_URL}; see CONTRIBUTING.md)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextlib.contextmanager
def session_database() -> Iterator[str]:
    """A database of this test session's own; yields its URL, drops it at the end."""
    admin = os.environ.get(POSTGRES_URL_ENV, DEFAULT_ADMIN_URL)
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        _missing(f"cannot connect to {admin}: {str(exc).strip().splitlines()[0]}")
    name = "phasegraph_test_" + uuid.uuid4().hex[:12]
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@contextlib.contextmanager
def isolated_postgres_url(url: str, **options: str) -> Iterator[str]:
    """``url`` with a schema no other test uses (dropped afterwards)."""
    schema = "t" + uuid.uuid4().hex[:16]
    parts = urlsplit(url)
    pairs = [*parse_qsl(parts.query), ("schema", schema), *options.items()]
    query = urlencode(pairs, quote_via=quote)
    try:
        yield urlunsplit(parts._replace(query=query))
    finally:
        drop_schema(url, schema)


def drop_schema(url: str, schema: str) -> None:
    """Drop a test's schema and everything in it."""
    with psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def sql(url: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement on the store URL's database (its schema first on the path)."""
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    schema = options.get("schema", "phasegraph")
    with psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'SET search_path TO "{schema}"'.encode())
        cursor = conn.execute(statement.encode(), params)
        return cursor.fetchall() if cursor.description else []


def libpq_url(url: str) -> str:
    """A store URL without phasegraph's own options (libpq refuses them)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("schema", "ttl", "pool")]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


class RestartablePostgres:
    """A private Postgres cluster in a temporary folder, to kill and restart at will.

    ``initdb`` refuses to run as root, so as root the cluster belongs to the
    ``postgres`` user (``runuser``). Every commit it acknowledged survives a kill: the
    write-ahead log is in the page cache before the acknowledgement, and recovery
    replays it on the next start (``fsync`` is off: only the machine's crash could lose
    it, and none is simulated).
    """

    def __init__(self) -> None:
        versions = sorted(_BIN.glob("*/bin/initdb"))
        if not versions:
            _missing(f"no initdb under {_BIN}")
        self._bin = versions[-1].parent
        self.dir = Path(tempfile.mkdtemp(prefix="phasegraph-pg-"))
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        initdb = [str(self._bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres"]
        subprocess.run(
            [*self._as, *initdb, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        argv = [
            *self._as,
            str(self._bin / "postgres"),
            *("-D", str(self.dir / "data"), "-p", str(self.port), "-k", str(self.dir)),
            *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
            *("-c", "full_page_writes=off", "-c", "max_connections=60"),
        ]
        log = (self.dir / "server.log").open("ab")
        with log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the private Postgres did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=1).close()
        except psycopg.Error:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL every process of the server at once, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
            deadline = time.monotonic() + 30
            while _group_alive(self.process.pid) and time.monotonic() < deadline:
                time.sleep(0.02)

    def stop(self) -> None:
        """Shut the server down (fast: its sessions are ended, then it exits)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=60)

    def log(self) -> str:
        """The server's log."""
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def remove(self) -> None:
        """Kill the server and delete its folder."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
