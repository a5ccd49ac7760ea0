"""A cancel request in the work queue keeps its reason and who asked, on a real Redis.

Any reason, JSON-looking or not, reads back as written with its actor; a request left
as plain text by an earlier version reads as its reason, naming nobody.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.store.redis import RedisStore
from phasegraph.testing import isolated_redis_store

pytestmark = pytest.mark.redis

ACTORS = st.none() | st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=20), "groups": st.lists(st.text(max_size=10))}
)

# Any text but a JSON object with a "reason" (which reads as a request of this version).
LEGACY = st.text(min_size=1, max_size=200).filter(lambda text: '"reason"' not in text)


@settings(max_examples=25)
@given(reason=st.text(max_size=200), actor=ACTORS, legacy=LEGACY)
def test_a_cancel_request_reads_back_as_written(
    redis_url: str, reason: str, actor: dict[str, Any] | None, legacy: str
) -> None:
    async def check() -> None:
        async with isolated_redis_store(redis_url) as store:
            assert isinstance(store, RedisStore)
            queue = store.work_queue()
            try:
                await queue.request_cancel("r1", reason, actor=actor)
                assert await queue.cancel_requested("r1") == {"reason": reason, "actor": actor}
                # As an earlier version wrote it: the reason alone, as plain text.
                await queue._client.set(queue._run_key("r1", "cancel"), legacy.encode())
                assert await queue.cancel_requested("r1") == {"reason": legacy, "actor": None}
                await queue.cancel_done("r1")
                assert await queue.cancel_requested("r1") is None
            finally:
                await queue.aclose()

    asyncio.run(check())
