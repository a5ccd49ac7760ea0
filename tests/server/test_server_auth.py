"""Principals and scopes over a real socket: token files, JWTs, the throttle, the proxy mode.

Time is the settings' clock, driven by the tests (token expiry, the failed sign-in
throttle); JWT expiry is decided by PyJWT against tokens that expired an hour ago.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given
from hypothesis import strategies as st
from test_server import FIXTURES, GATED, serving, settings_for, sse
from test_server_contract import SPEC, call

from phasegraph import Engine
from phasegraph.server import ServerSettings
from phasegraph.server._access import PUBLIC, ROUTE_SCOPES, SIGNED_IN
from phasegraph.server._jwt import JwtSettings
from phasegraph.server._throttle import FailureThrottle
from phasegraph.server._tokens import TokenBook, load_book, save_book
from phasegraph.store.memory import MemoryStore

ISSUER = "https://id.example"
AUDIENCE = "phasegraph-test"


class Clock:
    """Wall-clock seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def add_token(path: Path, name: str, *scopes: str, groups: tuple[str, ...] = (), **kw: Any) -> str:
    book, secret = load_book(path).add(name, scopes, groups, now=kw.pop("now", 0.0), **kw)
    save_book(path, book)
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def team(tmp_path: Path, clock: Clock) -> AsyncIterator[tuple[TestClient, Path]]:
    tokens = tmp_path / "tokens.json"
    save_book(tokens, TokenBook())
    settings = settings_for(tmp_path, tokens_file=tokens, token="operator-secret", clock=clock)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        yield client, tokens


async def test_a_missing_scope_is_403_and_names_the_scope(
    team: tuple[TestClient, Path],
) -> None:
    client, tokens = team
    reader = add_token(tokens, "rita", "runs:read", groups=("qa",))
    started = await client.post("/runs", json={"graph": "hello"}, headers=bearer(reader))
    assert started.status == 403
    body = await started.json()
    assert (body["code"], body["missing_scope"]) == ("missing_scope", "runs:start")
    assert "runs:start" in body["detail"]
    listed = await client.get("/runs", headers=bearer(reader))
    assert listed.status == 200
    me = await (await client.get("/whoami", headers=bearer(reader))).json()
    assert me == {"name": "rita", "groups": ["qa"], "scopes": ["runs:read"], "source": "token-file"}
    for path in ("/runs/x/cancel", "/runs/x/fork", "/runs/x/reply", "/runs/x/resume"):
        refused = await client.post(path, json={}, headers=bearer(reader))
        assert refused.status == 403, path
    assert (await refused.json())["missing_scope"] == "runs:resume"


async def test_start_scope_for_one_graph_starts_that_graph_only(
    team: tuple[TestClient, Path],
) -> None:
    client, tokens = team
    starter = add_token(tokens, "sam", "runs:start:hello")
    ok = await client.post("/runs", json={"graph": "hello"}, headers=bearer(starter))
    assert ok.status == 201, await ok.text()
    other = await client.post("/runs", json={"graph": "coding_task"}, headers=bearer(starter))
    assert other.status == 403
    assert (await other.json())["missing_scope"] == "runs:start:coding_task"
    upload = {"graph_yaml": "graph: hello\nnodes: []\n"}
    uploaded = await client.post("/runs", json=upload, headers=bearer(starter))
    assert (await uploaded.json())["missing_scope"] == "runs:start"
    reading = await client.get("/runs", headers=bearer(starter))
    assert (await reading.json())["missing_scope"] == "runs:read"


async def test_revoked_and_expired_tokens_are_401_without_a_restart(
    team: tuple[TestClient, Path], clock: Clock
) -> None:
    client, tokens = team
    kept = add_token(tokens, "kim", "runs:read", now=clock.now, expires=clock.now + 60)
    gone = add_token(tokens, "gus", "runs:read")
    assert (await client.get("/runs", headers=bearer(gone))).status == 200
    save_book(tokens, load_book(tokens).revoke("gus"))
    revoked = await client.get("/runs", headers=bearer(gone))
    assert revoked.status == 401
    assert revoked.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await client.get("/runs", headers=bearer(kept))).status == 200
    clock.now += 60
    expired = await client.get("/runs", headers=bearer(kept))
    assert expired.status == 401
    assert "expired" in (await expired.json())["detail"]
    # The operator's token still signs in, as the administrator.
    me = await (await client.get("/whoami", headers=bearer("operator-secret"))).json()
    assert (me["name"], me["scopes"]) == ("operator", ["admin"])
    assert "salt" in tokens.read_text()
    assert kept not in tokens.read_text()


async def test_an_event_stream_ends_when_its_token_is_revoked_or_expires(
    team: tuple[TestClient, Path], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream outlives its request's sign-in: it asks again as it goes, and ends."""
    monkeypatch.syspath_prepend(str(FIXTURES))  # the gate graph's actions
    client, tokens = team
    created = await client.post(
        "/runs",
        json={"graph_yaml": GATED, "input": {"topic": "caching"}},
        headers=bearer("operator-secret"),
    )
    assert created.status == 201, await created.text()
    run_id = (await created.json())["run_id"]  # it waits at a gate: its stream stays open
    revoked = add_token(tokens, "wes", "runs:read")
    expiring = add_token(tokens, "eve", "runs:read", now=clock.now, expires=clock.now + 60)
    for secret, take_away in (
        (revoked, lambda: save_book(tokens, load_book(tokens).revoke("wes"))),
        (expiring, lambda: setattr(clock, "now", clock.now + 60)),
    ):
        async with client.get(f"/runs/{run_id}/events", headers=bearer(secret)) as stream:
            assert stream.status == 200
            await sse(stream, until=lambda events: events[-1]["kind"] == "run_waiting")
            take_away()
            assert await sse(stream) == []  # the stream ends (sse gives up after 15 s)
        again = await client.get(f"/runs/{run_id}/events", headers=bearer(secret))
        assert again.status == 401


async def test_a_forged_token_of_a_known_id_is_refused(team: tuple[TestClient, Path]) -> None:
    client, tokens = team
    secret = add_token(tokens, "ada", "admin")
    forged = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    assert (await client.get("/runs", headers=bearer(forged))).status == 401
    assert (await client.get("/runs")).status == 401
    assert (await client.get("/healthz")).status == 200


async def test_refused_credentials_are_throttled_per_address(tmp_path: Path, clock: Clock) -> None:
    settings = settings_for(
        tmp_path, token="right", clock=clock, auth_failure_burst=3, auth_failure_refill=10.0
    )
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        for _ in range(3):
            assert (await client.get("/runs", headers=bearer("wrong"))).status == 401
        limited = await client.get("/runs", headers=bearer("right"))
        assert limited.status == 429
        assert limited.headers["Retry-After"] == "10"
        clock.now += 5
        assert (await client.get("/runs", headers=bearer("right"))).headers["Retry-After"] == "5"
        clock.now += 5
        assert (await client.get("/runs", headers=bearer("right"))).status == 200
        # No credential at all is not a guess: it spends nothing.
        for _ in range(5):
            assert (await client.get("/runs")).status == 401
        assert (await client.get("/runs", headers=bearer("right"))).status == 200


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_bucket(
    tmp_path: Path, clock: Clock
) -> None:
    common: dict[str, Any] = {
        "token": "right",
        "clock": clock,
        "auth_failure_burst": 1,
        "auth_failure_refill": 60.0,
    }
    for trusted in (True, False):
        settings = settings_for(tmp_path, trust_proxy=trusted, **common)
        async with MemoryStore() as store, serving(Engine(store), settings) as client:
            one = {**bearer("wrong"), "X-Forwarded-For": "203.0.113.9, 10.0.0.1"}
            assert (await client.get("/runs", headers=one)).status == 401
            other = {**bearer("right"), "X-Forwarded-For": "10.0.0.2"}
            answer = await client.get("/runs", headers=other)
            assert answer.status == (200 if trusted else 429)
            # A page served over the proxy's HTTPS is the server's own origin only when
            # the proxy's X-Forwarded-Proto is believed.
            page = {
                **bearer("right"),
                "X-Forwarded-For": "10.0.0.3",
                "X-Forwarded-Proto": "https",
                "Origin": f"https://127.0.0.1:{client.port}",
            }
            same_site = await client.get("/runs", headers=page)
            assert same_site.status == (200 if trusted else 403)


# ------------------------------------------------------------------------- JWTs


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks_of(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    values = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 3600,
        "scope": "runs:read gates:answer",
        "groups": ["reviewers"],
    }
    return {k: v for k, v in {**values, **changes}.items() if v is not None}


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    return rsa_key(), rsa_key()


async def test_jwts_sign_in_and_forged_expired_or_foreign_ones_are_refused(
    tmp_path: Path, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]
) -> None:
    good, stranger = keys
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(jwks_of(good, "k1")))
    settings = settings_for(
        tmp_path,
        jwt=JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks)),
        auth_failure_burst=100,
    )

    def sign(key: Any = good, kid: str = "k1", alg: str = "RS256", **changes: Any) -> str:
        return jwt.encode(claims(**changes), key, algorithm=alg, headers={"kid": kid})

    public_pem = good.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    hs_confused = _hmac_token(claims(), public_pem, header)
    unsigned = _unsigned(claims())
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        me = await client.get("/whoami", headers=bearer(sign()))
        assert me.status == 200, await me.text()
        assert await me.json() == {
            "name": "alice",
            "groups": ["reviewers"],
            "scopes": ["gates:answer", "runs:read"],
            "source": "jwt",
        }
        started = await client.post("/runs", json={"graph": "hello"}, headers=bearer(sign()))
        assert (await started.json())["missing_scope"] == "runs:start"
        refused = {
            "outside the JWKS": sign(key=stranger),
            "unknown kid": sign(key=stranger, kid="k2"),
            "expired": sign(exp=int(time.time()) - 3600),
            "another audience": sign(aud="someone-else"),
            "another issuer": sign(iss="https://evil.example"),
            "no subject": sign(sub=None),
            "HS confusion": hs_confused,
            "alg none": unsigned,
        }
        for why, token in refused.items():
            answer = await client.get("/runs", headers=bearer(token))
            assert answer.status == 401, why
        detail = {
            why: (await (await client.get("/runs", headers=bearer(refused[why]))).json())["detail"]
            for why in ("expired", "another audience", "another issuer")
        }
        assert "expired" in detail["expired"]
        assert "audience" in detail["another audience"]
        assert "issuer" in detail["another issuer"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hmac_token(body: dict[str, Any], secret: bytes, header: dict[str, Any]) -> str:
    """An HS256 token whose secret is the RSA public key (PyJWT refuses to make one)."""
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}"
    signature = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(signature)}"


def _unsigned(body: dict[str, Any]) -> str:
    header = {"alg": "none", "typ": "JWT", "kid": "k1"}
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}."


# ------------------------------------------------------------------- the throttle


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=30), st.sampled_from(["a", "b"])),
        max_size=60,
    )
)
def test_the_throttle_lets_an_address_guess_at_its_refill_rate_only(
    steps: list[tuple[float, str]],
) -> None:
    clock = Clock()
    start = clock.now
    throttle = FailureThrottle(burst=3, refill=10.0, clock=clock)
    tried = {"a": 0, "b": 0}
    for wait, address in steps:
        clock.now += wait
        if throttle.retry_after(address) is None:
            throttle.failed(address)
            tried[address] += 1
        else:
            assert 1 <= (throttle.retry_after(address) or 0) <= 10
    elapsed = clock.now - start
    for count in tried.values():
        assert count <= 3 + elapsed / 10.0
    clock.now += 30  # a full refill: every address may try again
    assert throttle.retry_after("a") is None
    assert throttle.retry_after("b") is None


# ---------------------------------------------------------------- the OpenAPI document


def test_the_document_lists_each_routes_scope_as_its_security() -> None:
    for (method, path), need in ROUTE_SCOPES.items():
        operation = SPEC["paths"][path][method.lower()]
        security = operation.get("security", SPEC["security"])
        if need == PUBLIC:
            assert security == [], path
            continue
        scopes = [] if need == SIGNED_IN else [need]
        assert security == [{"token": scopes}, {"jwt": scopes}], (method, path)
        for status in ("401", "403", "429"):
            assert status in operation["responses"], (method, path, status)


async def test_refusals_match_the_document(tmp_path: Path, clock: Clock) -> None:
    tokens = tmp_path / "tokens.json"
    reader = add_token(tokens, "rita", "runs:read")
    settings = settings_for(tmp_path, tokens_file=tokens, clock=clock, auth_failure_burst=1)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        auth = bearer(reader)
        for method, template, path in [
            ("POST", "/runs", "/runs"),
            ("POST", "/runs/{run_id}/reply", "/runs/r/reply"),
            ("POST", "/runs/{run_id}/fork", "/runs/r/fork"),
        ]:
            status, _ = await call(client, method, template, path, json={}, headers=auth)
            assert status == 403
        assert (await call(client, "GET", "/whoami", "/whoami", headers=auth))[0] == 200
        assert (await call(client, "GET", "/runs", "/runs"))[0] == 401
        assert (await call(client, "GET", "/runs", "/runs", headers=bearer("pgt_x_y")))[0] == 401
        assert (await call(client, "GET", "/whoami", "/whoami", headers=auth))[0] == 429


async def test_jwks_from_the_providers_url(
    tmp_path: Path, keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]
) -> None:
    good, stranger = keys
    served = web.Application()

    async def certs(request: web.Request) -> web.Response:
        return web.json_response(jwks_of(good, "k1"))

    served.add_routes([web.get("/certs", certs)])
    provider = TestServer(served)
    await provider.start_server()

    def settings(jwks: str) -> ServerSettings:
        checks = JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks=jwks)
        return settings_for(tmp_path, jwt=checks, auth_failure_burst=1)

    token = jwt.encode(claims(sub="bob"), good, algorithm="RS256", headers={"kid": "k1"})
    url = str(provider.make_url("/certs"))
    async with MemoryStore() as store, serving(Engine(store), settings(url)) as client:
        me = await client.get("/whoami", headers=bearer(token))
        assert (await me.json())["name"] == "bob"
        forged = jwt.encode(claims(), stranger, algorithm="RS256", headers={"kid": "k1"})
        assert (await client.get("/whoami", headers=bearer(forged))).status == 401
    await provider.close()
    # The provider is down: its keys cannot be fetched, which is the server's trouble
    # (503 and Retry-After), not the client's (no 401, and no 429 however often it asks).
    async with MemoryStore() as store, serving(Engine(store), settings(url)) as client:
        for _ in range(3):
            down = await client.get("/whoami", headers=bearer(token))
            assert down.status == 503
            assert down.headers["Retry-After"] == "5"
