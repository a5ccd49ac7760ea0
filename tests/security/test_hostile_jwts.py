"""Hostile JWTs and broken key files, over a real socket: 401 or 503, never a 5xx.

Every token of :func:`hostile` is one an attacker can make without the identity
provider's private key (or one the provider would never issue); each is refused 401 with
a reason, and a good token still signs in beside them. A JWKS file that turns unreadable
or malformed while the server runs makes every JWT a 503 naming the file, until it is
fixed — never a 500, never a traceback.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st
from security_kit import (
    b64,
    bearer,
    claims,
    forged,
    jwks_of,
    jwt_settings,
    rsa_key,
    serving,
    settings,
    sign,
)

from phasegraph import Engine
from phasegraph.errors import InputError
from phasegraph.server._jwt import JwtVerifier
from phasegraph.store.memory import MemoryStore

KEY = rsa_key()
STRANGER = rsa_key()


def _hs256(body: dict[str, Any], secret: bytes, kid: str = "k1") -> str:
    """An HS256 token: the "confusion" when ``secret`` is the server's RSA public key."""
    header = {"alg": "HS256", "typ": "JWT", "kid": kid}
    unsigned = forged(header, body).rsplit(".", 1)[0]
    signature = hmac.new(secret, unsigned.encode(), hashlib.sha256).digest()
    return f"{unsigned}.{b64(signature)}"


def _resigned(token: str, header: dict[str, Any]) -> str:
    """``token`` with its header replaced and its signature kept (now a forgery)."""
    _, body, signature = token.split(".")
    return f"{b64(json.dumps(header).encode())}.{body}.{signature}"


def hostile() -> dict[str, str]:
    """Tokens to refuse, by what is wrong with them."""
    public_pem = KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    good = sign(KEY)
    now = int(time.time())
    stranger_jwk = jwks_of(STRANGER)["keys"][0]
    ec_key = ec.generate_private_key(ec.SECP256R1())
    return {
        "alg none": forged({"alg": "none", "typ": "JWT", "kid": "k1"}, claims()),
        "alg None": forged({"alg": "None", "typ": "JWT", "kid": "k1"}, claims()),
        "alg NONE, signature kept": _resigned(good, {"alg": "NONE", "kid": "k1"}),
        "HS256 with the RSA public key as secret": _hs256(claims(), public_pem),
        "HS256 with an empty secret": _hs256(claims(), b""),
        "signed by a stranger, our kid": sign(STRANGER),
        "signed by a stranger, unknown kid": sign(STRANGER, kid="k2"),
        "no kid": forged({"alg": "RS256", "typ": "JWT"}, claims(), b"x" * 256),
        "kid a number": _resigned(good, {"alg": "RS256", "kid": 1}),
        "kid a path": _resigned(good, {"alg": "RS256", "kid": "../../../etc/passwd"}),
        "kid huge": _resigned(good, {"alg": "RS256", "kid": "k" * 3000}),
        "alg switched to RS512": _resigned(good, {"alg": "RS512", "kid": "k1"}),
        "alg switched to PS256": _resigned(good, {"alg": "PS256", "kid": "k1"}),
        "ES256 against an RSA key": sign(ec_key, alg="ES256"),
        "embedded jwk of the attacker": _resigned(
            sign(STRANGER), {"alg": "RS256", "kid": "k1", "jwk": stranger_jwk}
        ),
        "jku to the attacker's keys": _resigned(
            sign(STRANGER), {"alg": "RS256", "kid": "k1", "jku": "https://evil.example/k"}
        ),
        "x5u to the attacker's chain": _resigned(
            sign(STRANGER), {"alg": "RS256", "kid": "k1", "x5u": "https://evil.example/c"}
        ),
        "body changed, signature kept": ".".join(
            (
                good.split(".")[0],
                b64(json.dumps(claims(scope="admin")).encode()),
                good.split(".")[2],
            )
        ),
        "signature cut short": good[:-10],
        "signature garbage": good.rsplit(".", 1)[0] + ".!!!not-base64!!!",
        "expired": sign(KEY, exp=now - 3600),
        "not valid yet": sign(KEY, nbf=now + 3600),
        "no expiry": sign(KEY, exp=None),
        "expiry not a number": sign(KEY, exp="tomorrow"),
        "another audience": sign(KEY, aud="someone-else"),
        "audience list without ours": sign(KEY, aud=["a", "b"]),
        "no audience": sign(KEY, aud=None),
        "another issuer": sign(KEY, iss="https://evil.example"),
        "no issuer": sign(KEY, iss=None),
        "no subject": sign(KEY, sub=None),
        "empty subject": sign(KEY, sub=""),
        "subject a number": sign(KEY, sub=7),
        "subject a list": sign(KEY, sub=["alice"]),
        "header not JSON": f"{b64(b'not json')}.{good.split('.', 1)[1]}",
        "header a list": f"{b64(b'[1, 2]')}.{good.split('.', 1)[1]}",
        "body not JSON": f"{good.split('.')[0]}.{b64(b'not json')}.{good.split('.')[2]}",
        "body a list": f"{good.split('.')[0]}.{b64(b'[]')}.{good.split('.')[2]}",
        "three dots of nothing": "..",
        "not base64": "!!.??.**",
        "large (near the 8 KB header limit)": forged(
            {"alg": "RS256", "kid": "k1"}, claims(pad="x" * 4000), b"x"
        ),
    }


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient]:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(jwks_of(KEY)), encoding="utf-8")
    # A burst high enough that the whole list reaches the check (the throttle is tested
    # on its own in test_throttle.py).
    server = settings(tmp_path, jwt=jwt_settings(jwks), auth_failure_burst=10_000)
    async with MemoryStore() as store, serving(Engine(store), server) as served:
        yield served


async def test_every_hostile_jwt_is_refused_401_with_a_reason(client: TestClient) -> None:
    tokens = hostile()
    for why, token in tokens.items():
        answer = await client.get("/runs", headers=bearer(token))
        assert answer.status == 401, (why, await answer.text())
        body = await answer.json()
        assert body["code"] == "unauthorized", why
        assert body["detail"], why
        assert token not in body["detail"], why  # a refusal never echoes the credential
    good = await client.get("/runs", headers=bearer(sign(KEY)))
    assert good.status == 200, await good.text()


BROKEN_JWKS: dict[str, Callable[[Path], object]] = {
    "not JSON": lambda path: path.write_text("{not json", encoding="utf-8"),
    "empty": lambda path: path.write_text("", encoding="utf-8"),
    "not UTF-8": lambda path: path.write_bytes(b"\xff\xfe\x00"),
    "a list": lambda path: path.write_text("[1]", encoding="utf-8"),
    "no keys": lambda path: path.write_text("{}", encoding="utf-8"),
    "keys not objects": lambda path: path.write_text('{"keys": [1]}', encoding="utf-8"),
    "no usable key": lambda path: path.write_text('{"keys": [{"kty": "RSA"}]}', encoding="utf-8"),
    "nested too deep": lambda path: path.write_text("[" * 100_000, encoding="utf-8"),
    "gone": lambda path: path.unlink(),
    "a folder": lambda path: (path.unlink(), path.mkdir()),
}


@pytest.mark.parametrize("breakage", list(BROKEN_JWKS))
async def test_a_jwks_file_that_breaks_is_503_naming_it_until_fixed(
    tmp_path: Path, breakage: str
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(jwks_of(KEY)), encoding="utf-8")
    server = settings(tmp_path, jwt=jwt_settings(jwks), auth_failure_burst=1)
    token = sign(KEY)
    async with MemoryStore() as store, serving(Engine(store), server) as served:
        assert (await served.get("/runs", headers=bearer(token))).status == 200
        BROKEN_JWKS[breakage](jwks)
        for _ in range(3):  # a 503 is no refusal: the throttle (a burst of 1) is not told
            answer = await served.get("/runs", headers=bearer(token))
            assert answer.status == 503, await answer.text()
            assert answer.headers["Retry-After"]
            body = await answer.json()
            assert body["code"] == "sign_in_unavailable"
            assert str(jwks) in body["detail"]
        if jwks.is_dir():
            jwks.rmdir()
        jwks.write_text(json.dumps(jwks_of(KEY)), encoding="utf-8")
        assert (await served.get("/runs", headers=bearer(token))).status == 200


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
JWKS_LIKE = st.fixed_dictionaries(
    {"keys": st.lists(st.dictionaries(st.sampled_from(["kty", "kid", "n", "e", "crv", "x"]), JSON))}
)


@given(st.one_of(JSON, JWKS_LIKE).map(json.dumps).map(str.encode) | st.binary(max_size=64))
def test_any_jwks_file_either_loads_or_is_one_input_error_naming_it(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jwks.json"
        path.write_bytes(content)
        try:
            JwtVerifier(jwt_settings(path))
        except InputError as exc:
            problem = str(exc)
        else:
            return  # a JWKS with a usable key
    assert problem.startswith(str(path))
