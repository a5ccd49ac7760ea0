"""A cancel handed to the worker driving a run carries who asked for it, on a private Redis.

The real worker acts on the request between two steps and records its actor on the
cancel step (the command line's ``cancel`` names the local user); a request written by an
earlier phasegraph (the reason as plain text) still cancels, naming nobody.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest
from test_detach_cli import SIDE_GATE, _open_gate, cli, status_of
from test_worker_mail import _driven, _until
from test_workers import workers

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


def test_the_command_lines_cancel_by_a_worker_names_the_local_user(
    store_url: str, tmp_path: Path
) -> None:
    with workers(store_url, 1, tmp_path / "marks.txt"):
        run = ("run", str(SIDE_GATE), "--input", "n=100000", "--input", "nap=0.05", "--detach")
        assert cli(*run, "--store", store_url, "--run-id", "c1").returncode == 0
        _open_gate(store_url, "c1")
        cancelled = cli("cancel", "c1", "--reason", "enough", "--store", store_url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith("run c1 cancelled by the worker driving it")
        status_of(store_url, "c1", "cancelled")
    shown = cli("history", "c1", "--json", "--store", store_url)
    assert shown.returncode == 0, shown.stderr
    (cancel,) = [r for r in json.loads(shown.stdout) if r["kind"] == "cancel"]
    assert cancel["actor"] == {"name": f"local:{getpass.getuser()}", "groups": []}
