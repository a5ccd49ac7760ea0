"""Names and groups are two namespaces: a principal named ``group:release`` is no reviewer.

A gate names its reviewers as principals' names and ``group:NAME`` references. Over a
real socket, a server that takes all three kinds of credential — the operator's
``--token``, a token file, JWTs — is asked to answer a gate reserved for ``alice`` and the
group ``release`` by principals whose *names* look like the group: each is refused 403
and nothing is committed; a member of ``release`` then answers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from security_kit import (
    OPERATOR,
    add_token,
    bearer,
    jwks_of,
    jwt_settings,
    rsa_key,
    serving,
    settings,
    sign,
)

from builders import cli_argv
from phasegraph import Engine, open_store

GATED = """
graph: release_gate
nodes:
  - id: review
    machine: task
    bind:
      run:
        human: review
        reviewers: [alice, "group:release"]
        payload: {text: ship it?}
        triggers: [ok, fail]
"""
SPOOFED = "group:release"


@dataclass
class Gate:
    """A served run waiting at the gate, and the credentials the tests present."""

    client: TestClient
    run_id: str
    reply: dict[str, Any]
    seq: int
    tokens: dict[str, str]
    key: Any

    async def answer(self, secret: str) -> tuple[int, dict[str, Any]]:
        response = await self.client.post(
            f"/runs/{self.run_id}/reply", json=self.reply, headers=bearer(secret)
        )
        return response.status, await response.json()

    async def head(self) -> dict[str, Any]:
        response = await self.client.get(f"/runs/{self.run_id}", headers=bearer(OPERATOR))
        view: dict[str, Any] = await response.json()
        return view


@pytest.fixture
async def gate(tmp_path: Path) -> AsyncIterator[Gate]:
    key = rsa_key()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks_of(key)), encoding="utf-8")
    tokens = tmp_path / "tokens.json"
    scopes = ("gates:answer", "runs:read")
    secrets = {
        # Written into the file by hand: `phasegraph tokens add` refuses the name.
        "spoof": add_token(tokens, "spoof", *scopes, as_name=SPOOFED),
        "release": add_token(tokens, "release", *scopes, groups=("qa",)),
    }
    server = settings(
        tmp_path, token=OPERATOR, tokens_file=tokens, jwt=jwt_settings(tmp_path / "jwks.json")
    )
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(store_url) as store, serving(Engine(store), server) as client:
        started = await client.post("/runs", json={"graph_yaml": GATED}, headers=bearer(OPERATOR))
        assert started.status == 201, await started.text()
        run_id = (await started.json())["run_id"]
        for _ in range(3000):  # bounded: a guard for a run that never waits
            view = await (await client.get(f"/runs/{run_id}", headers=bearer(OPERATOR))).json()
            if view["status"] == "waiting":
                break
            await asyncio.sleep(0.01)
        (opened,) = view["interrupts"]
        reply = {"interrupt_id": opened["id"], "trigger": "ok", "step": opened["seq"]}
        yield Gate(client, run_id, reply, view["seq"], secrets, key)


async def test_the_group_name_spoof_is_403_for_every_credential_kind(gate: Gate) -> None:
    # The operator's --token: an administrator, and no member of any group.
    status, body = await gate.answer(OPERATOR)
    assert (status, body.get("code")) == (403, "not_a_reviewer"), body
    # A token of the token file, and JWTs, whose principal's name holds the group prefix:
    # refused at sign-in, whatever the route.
    spoofs = {
        "token file": gate.tokens["spoof"],
        "JWT": sign(gate.key, sub=SPOOFED, groups=[]),
        "JWT, prefix inside": sign(gate.key, sub="ops-group:release", groups=[]),
    }
    for kind, secret in spoofs.items():
        status, body = await gate.answer(secret)
        assert (status, body.get("code")) == (403, "reserved_name"), (kind, body)
        assert "'group:'" in body["detail"], kind
        me = await gate.client.get("/whoami", headers=bearer(secret))
        assert me.status == 403, kind
    # A principal *named* like the group, without the prefix, is no member either.
    status, body = await gate.answer(gate.tokens["release"])
    assert (status, body.get("code")) == (403, "not_a_reviewer"), body
    head = await gate.head()
    assert (head["seq"], head["status"]) == (gate.seq, "waiting")  # nothing committed

    member = sign(gate.key, sub="rhea", groups=["release"])
    status, body = await gate.answer(member)
    assert status == 200, body
    history = await gate.client.get(f"/runs/{gate.run_id}/history", headers=bearer(OPERATOR))
    records = (await history.json())["records"]
    (answer,) = [record for record in records if record["kind"] == "reply"]
    assert answer["actor"] == {"name": "rhea", "groups": ["release"]}


def test_the_token_command_refuses_a_name_with_the_group_prefix(tmp_path: Path) -> None:
    done = subprocess.run(
        cli_argv(
            "tokens", "add", SPOOFED, "--scope", "gates:answer", "--file", str(tmp_path / "t.json")
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"phasegraph: token name {SPOOFED!r} must match")
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "t.json").exists()
