"""A recovery's retry makes the same call again: the same effect id, the same Idempotency-Key.

The fallback chain's ``retry`` state ``retries: main``: the action it runs keeps the
effect ids of the main work's call, so a receiver that deduplicates on the key makes one
invoice however many attempts the chain takes. A state that is entered again as a new
attempt (a loop that is not a retry) gets a new id each time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from http_kit import Server
from phasegraph.api import Engine
from phasegraph.codec import decode_record
from phasegraph.model import RunStatus
from phasegraph.spec import load_graph, load_graph_text
from phasegraph.store import Commit, ForwardingStore, Lease
from phasegraph.store.memory import MemoryStore


def _fallback(url: str, retries: int = 1) -> str:
    node: dict[str, Any] = {
        "id": "bill",
        "machine": "fallback_chain",
        "with": {"budgets": {"retries": retries}},
        "bind": {
            "main": {"http": {"url": url, "method": "POST", "body": {"amount": 12}}},
            "recover": {"python": "phasegraph.concerns.fallback:recover", "triggers": ["retry"]},
            "emergency": {"python": "phasegraph.concerns.fallback:emergency", "triggers": ["fail"]},
        },
    }
    return json.dumps({"nodes": [node]})


async def test_a_retried_post_carries_the_key_of_its_first_attempt(server: Server) -> None:
    definition = load_graph_text(_fallback(server.url + "/invoice"), name="bill.yaml")
    async with MemoryStore() as store:
        engine = Engine(store)
        state = await engine.run(definition, {}, run_id="fx")
        history = await engine.history("fx")

    assert state.status is RunStatus.COMPLETED
    assert state.nodes["bill"].path == ("recovered",)
    # Two attempts of one call: one key, so one invoice (the 503 came after the work).
    assert dict(server.invoices) == {"fx:bill:0": 2}
    intents = [r.ledger.id for r in history if r.kind == "intent" and r.ledger]
    assert intents == ["fx:bill:0", "fx:bill:0"]


class _Killed(BaseException):
    """The process died here: nothing in the engine catches it."""


class _KilledAtSecondIntent(ForwardingStore):
    """Dies once the retry's intent is committed, before its request is sent."""

    intents = 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        if decode_record(commit.record).kind == "intent":
            self.intents += 1
            if self.intents == 2:
                raise _Killed


async def test_a_retry_cut_short_keeps_its_key_through_resume_and_run_again(
    server: Server,
) -> None:
    definition = load_graph_text(_fallback(server.url + "/invoice"), name="bill.yaml")
    async with MemoryStore() as store:
        with pytest.raises(_Killed):
            await Engine(_KilledAtSecondIntent(store)).run(definition, {}, run_id="fx")
        engine = Engine(store)
        state = await engine.resume("fx", graph=definition)
        [gate] = state.interrupts.values()
        assert gate.payload["effect_id"] == "fx:bill:0"
        state = await engine.reply("fx", gate.id, "run_again", graph=definition)

    assert state.status is RunStatus.COMPLETED
    assert dict(server.invoices) == {"fx:bill:0": 2}


_NEW_ATTEMPTS = """
machine: again
initial: main
states:
  main: {hook: main}
  wait: {hook: wait}
  again: {hook: main}
  done: {final: success}
transitions:
  - {trigger: error, source: [main, again], dest: wait}
  - {trigger: fail, source: [main, again], dest: wait}
  - {trigger: retry, source: wait, dest: again}
  - {trigger: ok, source: [main, again], dest: done}
"""


async def test_a_state_that_retries_nothing_makes_a_new_call(
    server: Server, tmp_path: Path
) -> None:
    (tmp_path / "again.yaml").write_text(_NEW_ATTEMPTS)
    bind = {
        "main": {"http": {"url": server.url + "/invoice", "method": "POST"}},
        "wait": {"python": "phasegraph.concerns.fallback:recover", "triggers": ["retry"]},
    }
    node = {"id": "bill", "machine": "again", "bind": bind}
    text = json.dumps({"machines": ["again.yaml"], "nodes": [node]})
    (tmp_path / "bill.yaml").write_text(text)
    definition = load_graph(tmp_path / "bill.yaml")
    async with MemoryStore() as store:
        state = await Engine(store).run(definition, {}, run_id="fx")

    assert state.status is RunStatus.COMPLETED
    assert dict(server.invoices) == {"fx:bill:0": 1, "fx:bill:2": 1}
