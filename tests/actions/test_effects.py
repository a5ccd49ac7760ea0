"""Effect ids and declared effects of actions: what each kind sends, commits and refuses.

Every action sees its step's effect id (``ctx.effect_id``): an ``http:`` request carries
it as ``Idempotency-Key``, a ``shell:`` command reads ``PHASEGRAPH_EFFECT_ID``. A ``once``
action (an ``http:`` POST by default, or any binding with ``effect: once``) commits its
intent before it runs; after a crash between the two, the node's policy decides.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from builders import TESTS
from http_kit import Server
from phasegraph.actions._effects import effect_policy
from phasegraph.api import Engine
from phasegraph.codec import decode_record
from phasegraph.errors import RunError, SpecError
from phasegraph.model import ActionDef, Effect, LedgerEntry, OnUnknown, RunStatus, StepRecord
from phasegraph.run import prepare
from phasegraph.spec import load_graph_text
from phasegraph.store import Commit, ForwardingStore, Lease, open_store
from phasegraph.store.memory import MemoryStore


def _graph(bind: dict[str, Any], *, machine: str = "task") -> str:
    return json.dumps({"nodes": [{"id": "call", "machine": machine, "bind": bind}]})


async def _run(
    text: str, store_url: str = "memory://", **run_input: Any
) -> tuple[Any, list[StepRecord]]:
    definition = load_graph_text(text, name="effects.yaml")
    async with open_store(store_url) as store:
        engine = Engine(store)
        state = await engine.run(definition, run_input, run_id="fx")
        return state, await engine.history("fx")


async def test_an_http_post_is_once_its_intent_committed_first_and_its_id_sent(
    server: Server,
) -> None:
    text = _graph({"run": {"http": {"url": server.url + "/echo/pay", "method": "POST"}}})
    state, history = await _run(text)

    assert state.status is RunStatus.COMPLETED
    assert server.seen[0]["headers"]["idempotency-key"] == "fx:call:0"
    assert [r.kind for r in history] == ["created", "start", "intent", "transition"]
    intent = history[2].ledger
    assert intent == LedgerEntry(id="fx:call:0", effect=Effect.ONCE, on_unknown=OnUnknown.ASK)
    assert state.nodes["call"].ledger == ()


async def test_a_get_commits_no_intent_and_a_header_the_binding_sets_wins(server: Server) -> None:
    request = {"url": server.url + "/echo/read", "headers": {"idempotency-key": "mine"}}
    state, history = await _run(_graph({"run": {"http": request}}))

    assert state.status is RunStatus.COMPLETED
    assert server.seen[0]["headers"]["idempotency-key"] == "mine"
    assert "intent" not in [r.kind for r in history]


async def test_a_shell_command_reads_its_effect_id_and_once_is_declared(tmp_path: Path) -> None:
    out = tmp_path / "id.txt"
    script = f"import os; open({str(out)!r}, 'w').write(os.environ['PHASEGRAPH_EFFECT_ID'])"
    bind = {"run": {"shell": [sys.executable, "-c", script], "effect": "once"}}
    state, history = await _run(_graph(bind))

    assert state.status is RunStatus.COMPLETED
    assert out.read_text() == "fx:call:0"
    assert [r.kind for r in history].count("intent") == 1


@pytest.mark.parametrize(
    ("config", "effect"),
    [
        ({"http": {"url": "http://x.test/", "method": "POST"}}, Effect.ONCE),
        ({"http": {"url": "http://x.test/", "method": "PATCH"}}, Effect.ONCE),
        ({"http": {"url": "http://x.test/", "method": "PUT"}}, Effect.IDEMPOTENT),
        ({"http": {"url": "http://x.test/"}}, Effect.IDEMPOTENT),
        ({"http": {"url": "http://x.test/", "method": "POST"}, "effect": "none"}, Effect.NONE),
        ({"shell": "true"}, Effect.IDEMPOTENT),
        ({"shell": "true", "effect": "once"}, Effect.ONCE),
    ],
)
def test_each_binding_kind_has_its_default_effect(config: dict[str, Any], effect: Effect) -> None:
    kind = "http" if "http" in config else "shell"
    assert effect_policy(ActionDef(kind=kind, config=config)).effect is effect


def test_reconcile_and_on_unknown_come_together_or_the_graph_is_refused() -> None:
    bind = {"run": {"shell": "true", "on_unknown": "reconcile"}}
    with pytest.raises(SpecError, match="on_unknown: reconcile needs reconcile"):
        load_graph_text(_graph(bind), name="effects.yaml")
    bind = {
        "run": {
            "shell": "true",
            "effect": "once",
            "on_unknown": "reconcile",
            "reconcile": "no_such_module:f",
        }
    }
    definition = load_graph_text(_graph(bind), name="effects.yaml")
    with pytest.raises(SpecError, match="cannot import reconciler 'no_such_module:f'"):
        prepare(definition, "effects.yaml")


class _Killed(BaseException):
    """The process died here: nothing in the engine catches it."""


class _KilledAfterIntent(ForwardingStore):
    async def commit(self, lease: Lease, commit: Commit) -> None:
        await super().commit(lease, commit)
        if decode_record(commit.record).kind == "intent":
            raise _Killed


@pytest.mark.parametrize(("answer", "posts"), [("happened", 0), ("run_again", 1)])
async def test_an_uncertain_action_is_asked_about_then_answered(
    server: Server, answer: str, posts: int
) -> None:
    text = _graph({"run": {"http": {"url": server.url + "/echo/pay", "method": "POST"}}})
    definition = load_graph_text(text, name="effects.yaml")
    async with MemoryStore() as store:
        with pytest.raises(_Killed):
            await Engine(_KilledAfterIntent(store)).run(definition, {}, run_id="fx")
        engine = Engine(store)
        state = await engine.resume("fx", graph=definition)
        assert state.status is RunStatus.WAITING
        [gate] = state.interrupts.values()
        assert (gate.kind, gate.payload["effect_id"], gate.payload["tool"]) == (
            "outcome_unknown",
            "fx:call:0",
            "",
        )
        assert gate.seq == state.seq  # the step that asked: a reply may quote it
        with pytest.raises(RunError, match="happened needs the trigger"):
            await engine.reply("fx", gate.id, "happened", graph=definition)
        payload = {"trigger": "ok"} if answer == "happened" else {}
        state = await engine.reply("fx", gate.id, answer, payload=payload, graph=definition)

    assert state.status is RunStatus.COMPLETED
    assert state.nodes["call"].path == ("done",)
    assert len(server.seen) == posts


async def test_what_a_python_function_declares_counts_unless_the_binding_says() -> None:
    here = str(TESTS / "fixtures" / "effects" / "graph.yaml")  # modules found beside it
    for binding, intents in (({}, 1), ({"effect": "idempotent"}, 0)):
        text = _graph({"run": {"python": "declared:charge", **binding}})
        definition = load_graph_text(text, name=here)
        async with MemoryStore() as store:
            state = await Engine(store).run(definition, {}, run_id="fx")
            kinds = [r.kind for r in await Engine(store).history("fx")]
        assert state.status is RunStatus.COMPLETED
        assert kinds.count("intent") == intents
