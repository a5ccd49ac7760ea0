"""The server records who decided what, and holds every signed-in principal to reviewers.

Over a real socket, with a token file and the operator's ``--token``, on a SQLite store
the real command line reads in a subprocess: a gate naming ``alice`` and the group
``release`` refuses bob and the operator (403, nothing committed) and takes alice's
answer once (a replay is 409); the start, cancel and fork steps name their principal.
A loopback server with no sign-in is trusted as the command line is, and recorded as
``local``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_server import serving, settings_for
from test_server_auth import add_token, bearer

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.server._tokens import TokenBook, save_book

REVIEWED = """
graph: team_gate
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
OPERATOR = "operator-secret"


class Team:
    """The server under test, its store's URL and a token per person."""

    def __init__(self, client: TestClient, store: str, tokens: Path) -> None:
        self.client = client
        self.store = store
        self.sam = add_token(tokens, "sam", "runs:start", "runs:read", groups=("ops",))
        self.bob = add_token(tokens, "bob", "gates:answer", "runs:read", groups=("qa",))
        self.alice = add_token(tokens, "alice", "gates:answer", "runs:read", groups=("qa",))
        self.rhea = add_token(tokens, "rhea", "gates:answer", groups=("release",))
        self.dana = add_token(tokens, "dana", "runs:cancel", groups=("ops",))
        self.fred = add_token(tokens, "fred", "runs:fork")

    async def call(self, secret: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = await self.client.post(path, json=body, headers=bearer(secret))
        return response.status, await response.json()

    async def get(self, path: str) -> Any:
        response = await self.client.get(path, headers=bearer(OPERATOR))
        assert response.status == 200, await response.text()
        return await response.json()

    async def waiting(self, run_id: str) -> dict[str, Any]:
        """The run once it waits at its gate (bounded: a guard for a stuck run)."""
        for _ in range(3000):
            view: dict[str, Any] = await self.get(f"/runs/{run_id}")
            if view["status"] == "waiting":
                return view
            await asyncio.sleep(0.01)
        raise AssertionError(f"run {run_id} never waited")

    async def start(self) -> dict[str, Any]:
        status, view = await self.call(self.sam, "/runs", {"graph_yaml": REVIEWED})
        assert status == 201, view
        return await self.waiting(view["run_id"])

    def cli_history(self, run_id: str) -> list[dict[str, Any]]:
        argv = cli_argv("history", run_id, "--json", "--store", self.store)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        records: list[dict[str, Any]] = json.loads(done.stdout)
        return records


@pytest.fixture
async def team(tmp_path: Path) -> AsyncIterator[Team]:
    tokens = tmp_path / "tokens.json"
    save_book(tokens, TokenBook())
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    settings = settings_for(tmp_path, tokens_file=tokens, token=OPERATOR)
    async with open_store(store) as opened, serving(Engine(opened), settings) as client:
        yield Team(client, store, tokens)


def actors(records: list[dict[str, Any]]) -> dict[int, tuple[str, str | None]]:
    """Each step's kind and the name of whoever decided it (``None``: the run itself)."""
    return {r["seq"]: (r["kind"], r["actor"] and r["actor"]["name"]) for r in records}


async def test_only_a_reviewer_answers_and_everyone_is_on_the_record(team: Team) -> None:
    view = await team.start()
    run_id = view["run_id"]
    (gate,) = view["interrupts"]
    assert gate["reviewers"] == ["alice", "group:release"]
    reply = {"interrupt_id": gate["id"], "trigger": "ok", "step": gate["seq"]}
    path = f"/runs/{run_id}/reply"

    for refused in (team.bob, OPERATOR):  # an administrator is not silently a reviewer
        status, body = await team.call(refused, path, reply)
        assert status == 403, body
        assert body["code"] == "not_a_reviewer"
        assert body["reviewers"] == ["alice", "group:release"]
        assert "may be answered only by alice, group:release" in body["detail"]
    head = await team.get(f"/runs/{run_id}")
    assert (head["seq"], head["status"]) == (view["seq"], "waiting")  # nothing committed

    status, body = await team.call(team.alice, path, reply)
    assert status == 200, body
    status, again = await team.call(team.alice, path, reply)
    assert status == 409, again
    assert again["code"] == "gate_answered"

    records = await asyncio.to_thread(team.cli_history, run_id)
    by = actors(records)
    assert by[0] == ("created", "sam")
    (answer,) = [r for r in records if r["kind"] == "reply"]
    assert answer["actor"] == {"name": "alice", "groups": ["qa"]}
    assert [name for _, name in by.values() if name] == ["sam", "alice"]
    served = await team.get(f"/runs/{run_id}/history")
    assert served["records"] == records  # the HTTP history is the command line's


async def test_a_member_of_a_reviewing_group_answers(team: Team) -> None:
    view = await team.start()
    (gate,) = view["interrupts"]
    reply = {"interrupt_id": gate["id"], "trigger": "fail"}
    status, body = await team.call(team.rhea, f"/runs/{view['run_id']}/reply", reply)
    assert status == 200, body
    records = (await team.get(f"/runs/{view['run_id']}/history"))["records"]
    (answer,) = [r for r in records if r["kind"] == "reply"]
    assert answer["actor"] == {"name": "rhea", "groups": ["release"]}


async def test_cancel_and_fork_name_their_principal(team: Team) -> None:
    view = await team.start()
    run_id = view["run_id"]
    status, forked = await team.call(team.fred, f"/runs/{run_id}/fork", {"at_seq": 0})
    assert status == 201, forked
    status, cancelled = await team.call(team.dana, f"/runs/{run_id}/cancel", {"reason": "no"})
    assert status == 200, cancelled
    assert cancelled["status"] == "cancelled"

    records = await asyncio.to_thread(team.cli_history, run_id)
    assert records[-1]["kind"] == "cancel"
    assert records[-1]["actor"] == {"name": "dana", "groups": ["ops"]}
    fork_records = (await team.get(f"/runs/{forked['run_id']}/history"))["records"]
    assert fork_records[0]["actor"] == {"name": "fred", "groups": []}


async def test_the_local_server_is_trusted_and_recorded_as_local(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)  # loopback, no sign-in: every request is `local`
    async with open_store("memory://") as store, serving(Engine(store), settings) as client:
        created = await client.post("/runs", json={"graph_yaml": REVIEWED})
        assert created.status == 201, await created.text()
        run_id = (await created.json())["run_id"]
        for _ in range(3000):
            view = await (await client.get(f"/runs/{run_id}")).json()
            if view["status"] == "waiting":
                break
            await asyncio.sleep(0.01)
        (gate,) = view["interrupts"]
        reply = {"interrupt_id": gate["id"], "trigger": "ok"}
        answered = await client.post(f"/runs/{run_id}/reply", json=reply)
        assert answered.status == 200, await answered.text()
        records = (await (await client.get(f"/runs/{run_id}/history")).json())["records"]
    local = {"name": "local", "groups": []}
    assert records[0]["actor"] == local
    (answer,) = [r for r in records if r["kind"] == "reply"]
    assert answer["actor"] == local
