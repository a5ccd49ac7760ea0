"""The worker tests' store: a private Redis, a key prefix per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from phasegraph.testing import isolated_redis_url


@pytest.fixture
async def store_url(redis_url: str) -> AsyncIterator[str]:
    """A store URL under a prefix of its own; its keys are deleted afterwards."""
    async with isolated_redis_url(redis_url) as url:
        yield url
