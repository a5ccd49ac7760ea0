"""The worker tests' store: a private Redis, a key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import redis.asyncio


def prefixed(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), ("prefix", prefix)])
    return urlunsplit(parts._replace(query=query))


@pytest.fixture
async def store_url(redis_url: str) -> AsyncIterator[str]:
    """A store URL under a prefix of its own; its keys are deleted afterwards."""
    prefix = "pgwork" + uuid.uuid4().hex[:10]
    yield prefixed(redis_url, prefix)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
