"""Key files that break under a running ``phasegraph serve``: 503 naming them, logged once.

The server checks tokens against its token file and JWTs against its JWKS file, both
re-read when they change. Broken while it runs (a bad edit, a half-copied file), each is
an outage of its own kind of credential: those requests are answered 503 with the file's
name and what is wrong, the other credentials keep working, the log says so once (not
once a request) and again when the file is fixed, and never shows a traceback. An event
stream, which checks its credential as it goes, is not ended by the outage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from pathlib import Path

import aiohttp
import pytest
from security_kit import (
    AUDIENCE,
    ISSUER,
    OPERATOR,
    add_token,
    bearer,
    events_until,
    jwks_of,
    rsa_key,
    serve_process,
    serving,
    settings,
    sign,
)

from builders import cli_argv
from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

GATED = """
graph: one_gate
nodes:
  - id: review
    machine: task
    bind: {run: {human: review, payload: {text: ship it?}, triggers: [ok, fail]}}
"""


def replace_file(path: Path, text: str) -> None:
    """Give ``path`` new content at once (written beside it, then renamed over it)."""
    beside = path.with_name(f".{path.name}.new")
    beside.write_text(text, encoding="utf-8")
    os.replace(beside, path)


async def statuses(url: str, secret: str, times: int = 3) -> list[tuple[int, str]]:
    """The status and detail of ``GET /runs`` with ``secret``, ``times`` times."""
    answers = []
    async with aiohttp.ClientSession(url, headers=bearer(secret)) as client:
        for _ in range(times):
            async with client.get("/runs") as response:
                body = await response.json()
                answers.append((response.status, body.get("detail", "")))
    return answers


async def test_broken_key_files_are_503_naming_them_and_logged_once(tmp_path: Path) -> None:
    key = rsa_key()
    jwks, tokens = tmp_path / "jwks.json", tmp_path / "tokens.json"
    good_jwks = json.dumps(jwks_of(key))
    jwks.write_text(good_jwks, encoding="utf-8")
    token = add_token(tokens, "rita", "runs:read")
    good_tokens = tokens.read_text(encoding="utf-8")
    jwt_token = sign(key, scope="runs:read")
    options = ("--tokens", str(tokens), "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE)
    # A burst of 2: were the 503s counted as refused credentials, the client would be
    # answered 429 long before the end.
    options += ("--jwks", str(jwks), "--auth-failure-burst", "2")
    async with serve_process(tmp_path, *options) as server:
        for secret in (jwt_token, token, OPERATOR):
            assert await statuses(server.url, secret, 1) == [(200, "")]

        replace_file(jwks, "{not json")
        for status, detail in await statuses(server.url, jwt_token):
            assert status == 503
            assert detail.startswith(f"{jwks}:1: not a JWKS")
        assert await statuses(server.url, token, 1) == [(200, "")]  # the token file works

        replace_file(tokens, '{"phasegraph_tokens": 1, "tokens": "nope"}')
        for status, detail in await statuses(server.url, token):
            assert status == 503
            assert detail.startswith(f'{tokens}: "tokens" must be a list')
        assert await statuses(server.url, OPERATOR, 1) == [(200, "")]  # --token works

        replace_file(jwks, good_jwks)
        replace_file(tokens, good_tokens)
        for secret in (jwt_token, token):
            assert await statuses(server.url, secret, 2) == [(200, "")] * 2
        log = await server.stop()

    assert server.process.returncode == 0
    assert not [line for line in log if "Traceback" in line]
    outages = [line for line in log if "cannot check credentials" in line]
    assert len(outages) == 2, log
    assert f"against JWTs: {jwks}:1: not a JWKS" in outages[0]
    assert f'against the token file: {tokens}: "tokens" must be a list' in outages[1]
    recovered = [line for line in log if "can check credentials again" in line]
    assert len(recovered) == 2, log


async def test_an_event_stream_outlives_a_token_file_that_cannot_be_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream's own checks meet the broken file (its outage is logged) and go on."""
    tokens = tmp_path / "tokens.json"
    reader = add_token(tokens, "rita", "runs:read")
    good = tokens.read_text(encoding="utf-8")
    server = settings(tmp_path, token=OPERATOR, tokens_file=tokens)
    async with MemoryStore() as store, serving(Engine(store), server) as client:
        created = await client.post("/runs", json={"graph_yaml": GATED}, headers=bearer(OPERATOR))
        assert created.status == 201, await created.text()
        run_id = (await created.json())["run_id"]
        async with client.get(f"/runs/{run_id}/events", headers=bearer(reader)) as stream:
            assert stream.status == 200
            await events_until(stream, lambda event: event["kind"] == "run_waiting")
            replace_file(tokens, "{broken")
            # Polled: a log record is no event to wait on. Bounded; the stream checks its
            # credential about every 50 ms.
            async with asyncio.timeout(60):
                while "against the token file" not in caplog.text:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            replace_file(tokens, good)
            view = await (await client.get(f"/runs/{run_id}", headers=bearer(OPERATOR))).json()
            (opened,) = view["interrupts"]
            reply = {"interrupt_id": opened["id"], "trigger": "ok"}
            answered = await client.post(
                f"/runs/{run_id}/reply", json=reply, headers=bearer(OPERATOR)
            )
            assert answered.status == 200, await answered.text()
            await events_until(stream, lambda event: event["kind"] == "run_completed")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().partition(":")[0] for r in errors] == [
        "cannot check credentials against the token file"
    ]


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"keys": [1]}', b"[]"])
def test_serve_refuses_a_jwks_file_it_cannot_read_in_one_line(
    tmp_path: Path, content: bytes
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_bytes(content)
    options = ("--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE, "--jwks", str(jwks))
    done = subprocess.run(
        cli_argv("serve", "--port", "0", "--store", "memory://", *options),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"phasegraph: {jwks}")
    assert "not a JWKS" in done.stderr
    assert len(done.stderr.splitlines()) == 1  # no traceback
