"""The worker tests' store: a private Redis server or cluster, a key prefix per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from phasegraph.testing import isolated_redis_url


@pytest.fixture(params=["server", "cluster"])
def base_url(request: pytest.FixtureRequest) -> str:
    """A Redis server's URL, or a 3-primary Redis Cluster's (``redis+cluster://``)."""
    fixture = "redis_url" if request.param == "server" else "redis_cluster_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
async def store_url(base_url: str) -> AsyncIterator[str]:
    """A store URL under a prefix of its own; its keys are deleted afterwards."""
    async with isolated_redis_url(base_url) as url:
        yield url
