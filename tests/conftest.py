"""Fixtures shared by the whole test suite."""

from collections.abc import Iterator

import pytest

from phasegraph.testing import redis_server


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis: ``$PHASEGRAPH_TEST_REDIS_URL`` or a private server.

    Tests that use it fail (never skip) when no Redis can be had. Give each test its own
    keys, e.g. with ``phasegraph.testing.isolated_redis_store``.
    """
    with redis_server() as url:
        yield url
