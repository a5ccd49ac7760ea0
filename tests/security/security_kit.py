"""What the security suite's tests share: keys and JWTs, token files, served servers.

Every test here attacks a server over a real socket: the app of
:func:`phasegraph.server.create_app` on aiohttp's test server (a TCP listener on
127.0.0.1), or a ``phasegraph serve`` process when its log is what is checked.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import rsa

from builders import serve_command
from phasegraph import Engine
from phasegraph.server import ServerSettings, create_app
from phasegraph.server._jwt import JwtSettings
from phasegraph.server._tokens import load_book, save_book

ISSUER = "https://id.example"
AUDIENCE = "phasegraph-security"
OPERATOR = "operator-secret"
"""The ``--token`` of the servers here: the administrator ``operator``."""


class Clock:
    """Wall-clock seconds the test moves by hand (the throttle, token expiry)."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def rsa_key() -> rsa.RSAPrivateKey:
    """A fresh 2048-bit RSA key."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks_of(key: rsa.RSAPrivateKey, kid: str = "k1") -> dict[str, Any]:
    """A JWKS holding ``key``'s public half as ``kid``."""
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}


def claims(**changes: Any) -> dict[str, Any]:
    """Good claims for the servers here (``None`` drops a claim)."""
    now = int(time.time())
    values = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 3600,
        "scope": "runs:read gates:answer",
        "groups": ["qa"],
    }
    return {k: v for k, v in {**values, **changes}.items() if v is not None}


def sign(key: Any, kid: str = "k1", alg: str = "RS256", **changes: Any) -> str:
    """A JWT of :func:`claims` (with ``changes``) signed by ``key``."""
    return jwt.encode(claims(**changes), key, algorithm=alg, headers={"kid": kid})


def b64(data: bytes) -> str:
    """Base64url without padding, as JWTs encode their parts."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], body: dict[str, Any], signature: bytes = b"") -> str:
    """A JWT put together by hand (PyJWT refuses to make the hostile ones)."""
    head = b64(json.dumps(header).encode())
    return f"{head}.{b64(json.dumps(body).encode())}.{b64(signature)}"


def jwt_settings(jwks: Path) -> JwtSettings:
    """JWT sign-in against the JWKS file ``jwks``."""
    return JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks))


def add_token(
    path: Path, name: str, *scopes: str, groups: tuple[str, ...] = (), as_name: str = ""
) -> str:
    """Add a token to a token file and return its secret.

    ``as_name`` renames the entry afterwards, as a hand edit of the file would: the name
    ``phasegraph tokens add`` would refuse.
    """
    book, secret = load_book(path).add(name, scopes, groups, now=0.0)
    if as_name:
        *kept, added = book.entries
        book = replace(book, entries=(*kept, replace(added, name=as_name)))
    save_book(path, book)
    return secret


def bearer(secret: str) -> dict[str, str]:
    """The ``Authorization`` header for ``secret``."""
    return {"Authorization": f"Bearer {secret}"}


def settings(tmp_path: Path, **changes: Any) -> ServerSettings:
    """Server settings for the tests: uploads under ``tmp_path``, quick polling."""
    values: dict[str, Any] = {
        "upload_dir": tmp_path / "uploads",
        "poll_interval": 0.05,
        "adopt_interval": 0.05,
        **changes,
    }
    return ServerSettings(**values)


@contextlib.asynccontextmanager
async def serving(engine: Engine, server_settings: ServerSettings) -> AsyncIterator[TestClient]:
    """Serve ``create_app(engine)`` on 127.0.0.1 and yield a client; shut down on exit."""
    app = create_app(engine, settings=server_settings)
    async with TestClient(TestServer(app)) as client:
        yield client


async def events_until(
    response: ClientResponse, until: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Read a run's Server-Sent Events (their JSON data) until one that ``until`` accepts.

    Raises:
        AssertionError: The stream ended first.
    """
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(60):
        async for raw in response.content:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
                if until(events[-1]):
                    return events
    raise AssertionError(f"the stream ended after {[event['kind'] for event in events]}")


class Served:
    """A ``phasegraph serve`` process: its address, and its log (stderr) read as it comes."""

    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url
        self.lines: list[str] = []

    async def line_where(self, wanted: Callable[[str], bool]) -> str:
        """The first log line (read so far or to come) that ``wanted`` accepts."""
        assert self.process.stderr is not None
        async with asyncio.timeout(60):
            for line in self.lines:
                if wanted(line):
                    return line
            while True:
                raw = await self.process.stderr.readline()
                assert raw, "the server's log ended:\n" + "".join(self.lines)
                self.lines.append(raw.decode())
                if wanted(self.lines[-1]):
                    return self.lines[-1]

    async def stop(self) -> list[str]:
        """Stop the server (SIGINT, as Ctrl-C) and return its whole log."""
        assert self.process.stderr is not None
        self.process.send_signal(2)
        rest = await asyncio.wait_for(self.process.stderr.read(), 60)
        await self.process.wait()
        self.lines += rest.decode().splitlines(keepends=True)
        return self.lines


@contextlib.asynccontextmanager
async def serve_process(tmp_path: Path, *options: str) -> AsyncIterator[Served]:
    """``phasegraph serve`` on a free port with a SQLite store and ``options``."""
    env = {**os.environ, "PHASEGRAPH_TOKEN": OPERATOR}
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    uploads = str(tmp_path / "uploads")
    async with serve_command(
        "--store", store, "--port", "0", "--upload-dir", uploads, *options, cwd=tmp_path, env=env
    ) as (process, address):
        yield Served(process, address)
