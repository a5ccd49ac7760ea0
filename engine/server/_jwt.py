"""Bearer JWTs from the team's identity provider, checked with PyJWT against a JWKS.

Only asymmetric signatures are accepted (RSA, RSA-PSS, ECDSA, EdDSA) and only with a key
of the JWKS named by the token's ``kid``: ``alg: none`` and HMAC tokens (the "HS
confusion", an RSA public key used as an HMAC secret) are refused before any check. The
issuer, audience, expiry and subject are required. The JWKS is a file (re-read when it
changes; while it cannot be read, every JWT is answered 503 naming it) or an ``https://``
URL (PyJWT's ``PyJWKClient``: cached, fetched again for a ``kid`` it does not know).

PyJWT is an optional dependency (the ``auth`` extra): it is imported only
when a server is configured for JWTs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from phasegraph._extras import install_hint
from phasegraph.errors import InputError
from phasegraph.server._keyfile import KeyFile
from phasegraph.server._principal import CredentialRefused, Principal, SignInUnavailable

if TYPE_CHECKING:
    import jwt

__all__ = ["JwtSettings", "JwtVerifier"]

# Algorithm families by key type: a token may use only its key's family.
_FAMILIES: Final = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "EC": frozenset({"ES256", "ES384", "ES512"}),
    "OKP": frozenset({"EdDSA"}),
}
_ASYMMETRIC: Final = frozenset().union(*_FAMILIES.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class JwtSettings:
    """How the server checks JWTs and reads a principal from their claims.

    Attributes:
        issuer: The ``iss`` every token must carry.
        audience: The ``aud`` every token must include (this server's name at the provider).
        jwks: A JWKS file, or the provider's ``https://`` JWKS URL.
        name_claim: The claim naming the principal.
        scopes_claim: The claim with its scopes (a space-separated string or a list).
        groups_claim: The claim with its groups (a list or a space-separated string).
        leeway: Seconds of clock difference tolerated on ``exp`` and ``nbf``.
    """

    issuer: str
    audience: str
    jwks: str
    name_claim: str = "sub"
    scopes_claim: str = "scope"
    groups_claim: str = "groups"
    leeway: float = 30.0


def _words(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list | tuple):
        return tuple(str(item) for item in value if isinstance(item, str))
    return ()


class JwtVerifier:
    """Turns a JWT into a :class:`Principal`, or refuses it."""

    def __init__(self, settings: JwtSettings) -> None:
        try:
            import jwt
        except ImportError:
            raise InputError(
                f"JWT sign-in needs PyJWT with its crypto extra: {install_hint('auth')}"
            ) from None
        self._jwt = jwt
        self._settings = settings
        self._keys: jwt.PyJWKClient | KeyFile[dict[str, jwt.PyJWK]]
        if settings.jwks.startswith(("https://", "http://")):
            self._keys = jwt.PyJWKClient(settings.jwks, cache_jwk_set=True, lifespan=300)
        else:
            self._keys = KeyFile(Path(settings.jwks), self._read_jwks)  # said at start-up

    def _read_jwks(self, path: Path) -> dict[str, jwt.PyJWK]:
        """The keys of a JWKS file, by ``kid``.

        Raises:
            InputError: The file cannot be read, or holds no JWKS with a usable key.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"{path}: cannot read the JWKS ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a JWKS (not UTF-8 text)") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: not a JWKS ({exc.msg})") from None
        except RecursionError:
            raise InputError(f"{path}: not a JWKS (nested too deeply to read)") from None
        keys = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(keys, list) or not all(isinstance(key, dict) for key in keys):
            raise InputError(f'{path}: not a JWKS (expected an object with a "keys" list)')
        try:
            found = self._jwt.PyJWKSet.from_dict(data).keys
        except self._jwt.PyJWTError as exc:
            raise InputError(f"{path}: not a usable JWKS ({exc})") from None
        return {key.key_id: key for key in found if key.key_id}

    def _key_for(self, token: str, kid: str) -> jwt.PyJWK:
        if isinstance(self._keys, self._jwt.PyJWKClient):
            return self._keys.get_signing_key_from_jwt(token)  # fetches on an unknown kid
        key = self._keys.keys().get(kid)  # SignInUnavailable while the file is broken
        if key is None:
            raise CredentialRefused(f"the token's key {kid!r:.60} is not in the server's JWKS")
        return key

    def _signing_key(self, token: str) -> tuple[jwt.PyJWK, str]:
        """The JWKS key the token names and the algorithm it may be checked with."""
        header = self._jwt.get_unverified_header(token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in _ASYMMETRIC:
            raise CredentialRefused(f"JWT algorithm {alg!r:.20} is refused")
        if not isinstance(kid, str) or not kid:
            raise CredentialRefused("the JWT names no key (kid)")
        key = self._key_for(token, kid)
        if alg not in _FAMILIES.get(str(key.key_type), frozenset()):
            raise CredentialRefused(f"JWT algorithm {alg} does not fit its {key.key_type} key")
        return key, str(alg)

    def _verify(self, token: str) -> Principal:
        jwt, settings = self._jwt, self._settings
        try:
            key, alg = self._signing_key(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway,
                options={"require": ["exp", "iss", "aud", settings.name_claim]},
            )
        except jwt.ExpiredSignatureError:
            raise CredentialRefused("the JWT has expired") from None
        except jwt.InvalidAudienceError:
            raise CredentialRefused("the JWT is for another audience") from None
        except jwt.InvalidIssuerError:
            raise CredentialRefused("the JWT is from another issuer") from None
        except jwt.PyJWKClientConnectionError as exc:
            raise SignInUnavailable(
                f"the identity provider's keys are out of reach ({exc})"
            ) from None
        except jwt.PyJWKClientError as exc:
            reason = f"the JWT's key is not in the provider's JWKS ({exc})"
            raise CredentialRefused(reason) from None
        except jwt.PyJWTError as exc:
            raise CredentialRefused(f"the JWT is refused ({exc})") from None
        name = claims.get(settings.name_claim)
        if not isinstance(name, str) or not name:
            raise CredentialRefused(f"the JWT's {settings.name_claim!r} claim names no one")
        scopes = frozenset(_words(claims.get(settings.scopes_claim)))
        groups = _words(claims.get(settings.groups_claim))
        return Principal(name, groups, scopes, "jwt")

    async def principal(self, token: str) -> Principal:
        """The principal a JWT names (a JWKS URL may be fetched: off the event loop).

        Raises:
            CredentialRefused: The token is not good, with the reason.
            SignInUnavailable: The JWKS file cannot be read, or the JWKS URL does not answer.
        """
        if isinstance(self._keys, self._jwt.PyJWKClient):
            return await asyncio.to_thread(self._verify, token)
        return self._verify(token)
