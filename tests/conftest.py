"""Fixtures shared by the whole test suite, and the hypothesis profiles."""

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from phasegraph.testing import redis_cluster, redis_server
from postgres_kit import RestartablePostgres, session_database

# CI runs the same examples every time, so a red CI reproduces locally with
# HYPOTHESIS_PROFILE=ci; local runs explore new examples and remember failures. Neither
# judges a test by the clock (no deadline, no too-slow health check): the suite runs on
# every core, beside whatever else the machine does.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis: ``$PHASEGRAPH_TEST_REDIS_URL`` or a private server.

    Tests that use it fail (never skip) when no Redis can be had. Give each test its own
    keys, e.g. with ``phasegraph.testing.isolated_redis_store``.
    """
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """``redis+cluster://`` URL of a real Redis Cluster of three primaries (started once).

    ``$PHASEGRAPH_TEST_REDIS_CLUSTER_URL``, or three private ``redis-server`` processes.
    Tests that use it fail (never skip) when no cluster can be had.
    """
    with redis_cluster() as url:
        yield url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a Postgres database of this session's own (created and dropped here).

    Made on ``$PHASEGRAPH_TEST_POSTGRES_URL`` (default: the local server's ``test``
    database as ``postgres``). Without a server the tests that use it skip, and fail
    under ``CI=true``. Give each test its own schema, e.g. with
    ``postgres_kit.isolated_postgres_url``.
    """
    with session_database() as url:
        yield url


@pytest.fixture
def pg_server() -> Iterator[RestartablePostgres]:
    """A private Postgres of this test's own, started, to kill or restart (removed after)."""
    one = RestartablePostgres()
    try:
        one.start()
        yield one
    finally:
        one.remove()
