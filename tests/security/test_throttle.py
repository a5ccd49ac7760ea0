"""The sign-in throttle at work over a real socket, and the fuzzer that has to raise it.

An address that sends a burst of refused credentials is answered 429 for every credential
it sends, good or bad, until it has waited (the clock is the settings' own, moved by the
test). What is no guess costs nothing: a request without a credential, a good credential
that names a reserved name or lacks a scope, a credential that cannot be checked now.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

from security_kit import (
    OPERATOR,
    Clock,
    add_token,
    bearer,
    jwks_of,
    jwt_settings,
    rsa_key,
    serving,
    settings,
    sign,
)

from builders import REPO
from phasegraph import Engine
from phasegraph.store.memory import MemoryStore

BURST, REFILL = 3, 10.0


async def test_a_burst_of_refused_credentials_is_429_until_the_address_waits(
    tmp_path: Path,
) -> None:
    clock = Clock()
    key = rsa_key()
    (tmp_path / "jwks.json").write_text(json.dumps(jwks_of(key)), encoding="utf-8")
    tokens = tmp_path / "tokens.json"
    reader = add_token(tokens, "rita", "runs:read")
    spoof = add_token(tokens, "spoof", "runs:read", as_name="group:ops")
    server = settings(
        tmp_path,
        token=OPERATOR,
        tokens_file=tokens,
        jwt=jwt_settings(tmp_path / "jwks.json"),
        clock=clock,
        auth_failure_burst=BURST,
        auth_failure_refill=REFILL,
    )
    async with MemoryStore() as store, serving(Engine(store), server) as client:
        # None of these is a guess at a credential: any number of them costs nothing.
        free = [
            ({}, 401),  # no credential
            (bearer(spoof), 403),  # a good token whose name is refused
            (bearer(sign(key, sub="group:ops")), 403),  # a good JWT whose name is refused
            (bearer(reader), 403),  # a good token without the scope
        ]
        for _ in range(BURST + 2):
            for headers, status in free:
                answer = await client.post("/runs", json={"graph": "hello"}, headers=headers)
                assert answer.status == status, await answer.text()

        guesses = [bearer("wrong"), bearer("pgt_0123456789ab_nope"), bearer(sign(rsa_key()))]
        for headers in guesses:
            assert (await client.get("/runs", headers=headers)).status == 401
        for secret in (OPERATOR, reader, "wrong"):  # good and bad alike, unchecked
            limited = await client.get("/runs", headers=bearer(secret))
            assert limited.status == 429
            assert limited.headers["Retry-After"] == str(int(REFILL))
            assert (await limited.json())["code"] == "too_many_requests"
        assert (await client.get("/healthz")).status == 200  # public routes ask nothing

        clock.now += REFILL  # one attempt regained: a good credential signs in
        assert (await client.get("/runs", headers=bearer(OPERATOR))).status == 200


def test_the_fuzzer_says_it_raised_the_burst(tmp_path: Path) -> None:
    """``.ci/fuzz`` raises the burst for schemathesis's wrong credentials, and says so first.

    Run as it is, with a ``python3`` that fails at once: the script stops at its first
    step (making its virtualenv), after what it says before anything else.
    """
    script = (REPO / ".ci" / "fuzz").read_text(encoding="utf-8")
    (burst,) = re.findall(r"^burst=(\d+)$", script, re.MULTILINE)
    assert '--auth-failure-burst "$burst"' in script  # the server gets what is said
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(REPO / ".ci" / "fuzz")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    said = done.stdout.splitlines()[0]
    assert f"burst is raised to {burst} refused credentials" in said
    assert "--auth-failure-burst" in said
    assert "reach the handlers" in said
