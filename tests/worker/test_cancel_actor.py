"""A cancel handed to the worker driving a run carries who asked for it, on a private Redis.

The real worker acts on the request between two steps and records its actor on the
cancel step; a request written by an earlier phasegraph (the reason as plain text) still
cancels, naming nobody.
"""

from __future__ import annotations

import pytest
from test_worker_mail import _driven, _until

from phasegraph.model import Actor, RunStatus
from phasegraph.worker._mail import QueueMailbox, cancel_by_worker

pytestmark = pytest.mark.redis


async def test_a_cancel_by_the_worker_records_who_asked(store_url: str) -> None:
    dana = Actor(name="dana", groups=("ops",))
    async with _driven(store_url) as (engine, queue, run_id):
        state = await cancel_by_worker(engine, queue, run_id, "enough", actor=dana)
        assert state.status is RunStatus.CANCELLED
        history = await engine.history(run_id)
    (cancel,) = [record for record in history if record.kind == "cancel"]
    assert cancel.actor == dana
    assert state.nodes["count"].error == "enough"


async def test_a_plain_text_request_from_before_cancels_naming_nobody(store_url: str) -> None:
    async with _driven(store_url) as (engine, queue, run_id):
        # As an earlier version wrote it: the reason alone, not JSON.
        mailbox = QueueMailbox(queue)
        await queue._client.set(queue._run_key(run_id, "cancel"), b"old words")  # type: ignore[attr-defined]
        found = await mailbox.cancel_requested(run_id)
        assert found is not None
        assert (found.reason, found.actor) == ("old words", None)
        await queue.enqueue(run_id)
        state = await _until(engine, run_id, lambda s: s.status is RunStatus.CANCELLED)
        history = await engine.history(run_id)
    assert state.nodes["count"].error == "old words"
    assert [record.actor for record in history if record.kind == "cancel"] == [None]
