"""Who may call which route: authentication (401), the scope table (403), the throttle (429).

:data:`ROUTE_SCOPES` is the one table of what every route needs: a scope, any signed-in
principal, or nothing (health probes and the viewer's files). The middleware built by
:func:`access_guard` authenticates the request's bearer credential into a
:class:`~phasegraph.server._principal.Principal` (401 when there is none or it is refused),
rate-limits refused credentials per client address (429 with ``Retry-After``) and answers
403 naming the missing scope. ``GET /whoami`` tells the viewer who it is and what it may do.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from phasegraph.server._jwt import JwtVerifier
from phasegraph.server._principal import (
    ADMIN,
    GATES_ANSWER,
    PRINCIPAL,
    RUNS_CANCEL,
    RUNS_FORK,
    RUNS_MESSAGE,
    RUNS_MIGRATE,
    RUNS_READ,
    RUNS_RESUME,
    RUNS_START,
    SCOPES,
    CredentialRefused,
    NameRefused,
    Principal,
    ScopeMissing,
    SignInUnavailable,
    check_name,
    principal_of,
)
from phasegraph.server._support import ServerSettings, ok, problem
from phasegraph.server._throttle import FailureThrottle
from phasegraph.server._tokens import TOKEN_PREFIX, TokenFile

__all__ = [
    "PUBLIC",
    "ROUTE_SCOPES",
    "SIGNED_IN",
    "Authenticator",
    "access_guard",
    "forbidden",
    "require_start",
    "routes",
]

_log = logging.getLogger("phasegraph.server")

PUBLIC: Final = "public"
"""A route anyone may call: no credential is asked for."""
SIGNED_IN: Final = "signed-in"
"""A route any authenticated principal may call, whatever its scopes."""

ROUTE_SCOPES: Final[Mapping[tuple[str, str], str]] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/ui"): PUBLIC,  # the viewer's files hold no data; the page asks for a token
    ("GET", "/ui/"): PUBLIC,
    ("GET", "/ui/{name}"): PUBLIC,
    ("GET", "/whoami"): SIGNED_IN,
    ("POST", "/runs"): RUNS_START,  # runs:start:GRAPH is checked once the graph is known
    ("GET", "/runs"): RUNS_READ,
    ("GET", "/runs/{run_id}"): RUNS_READ,
    ("GET", "/runs/{run_id}/snapshot"): RUNS_READ,
    ("GET", "/runs/{run_id}/history"): RUNS_READ,
    ("GET", "/runs/{run_id}/errors"): RUNS_READ,
    ("GET", "/runs/{run_id}/graph"): RUNS_READ,
    ("GET", "/runs/{run_id}/gates/{gate_id}/files"): RUNS_READ,
    ("GET", "/runs/{run_id}/events"): RUNS_READ,
    ("POST", "/runs/{run_id}/replay"): RUNS_READ,  # re-drives in memory: changes nothing
    ("POST", "/runs/{run_id}/reply"): GATES_ANSWER,
    ("POST", "/runs/{run_id}/messages"): RUNS_MESSAGE,
    ("POST", "/runs/{run_id}/resume"): RUNS_RESUME,
    ("POST", "/runs/{run_id}/cancel"): RUNS_CANCEL,
    ("POST", "/runs/{run_id}/fork"): RUNS_FORK,
    ("POST", "/runs/{run_id}/migrate"): RUNS_MIGRATE,
}
"""What each route (method, path template) needs; a path no route serves needs sign-in."""

_CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="phasegraph"'}
_OPERATOR: Final = Principal("operator", (), frozenset({ADMIN}), "token")
_LOCAL: Final = Principal("local", (), frozenset({ADMIN}), "local")


class Authenticator:
    """Every credential source the server was given, tried by the credential's shape."""

    def __init__(self, settings: ServerSettings) -> None:
        token = settings.token
        self._operator = f"Bearer {token}".encode() if token else None
        self._file = (
            TokenFile(settings.tokens_file, settings.clock) if settings.tokens_file else None
        )
        self._jwt = JwtVerifier(settings.jwt) if settings.jwt else None
        self._read_only = settings.read_only
        self.throttle = FailureThrottle(
            settings.auth_failure_burst, settings.auth_failure_refill, settings.clock
        )
        # Per credential source ("the token file", "JWTs"): why it cannot check one now,
        # as logged (once: every request meanwhile is a 503 the log need not repeat).
        self._outages: dict[str, str] = {}

    @property
    def read_only(self) -> bool:
        """Whether the server only reads runs (``serve --read-only``)."""
        return self._read_only

    @property
    def open(self) -> bool:
        """Whether no credential is needed (a loopback server given none)."""
        return self._operator is None and self._file is None and self._jwt is None

    async def principal(self, header: str) -> Principal:
        """The principal an ``Authorization`` header value names.

        Raises:
            CredentialRefused: The credential is unknown, revoked, expired or forged.
            NameRefused: The credential is good, but names no one a principal may be.
            SignInUnavailable: The credential cannot be checked now (a key file cannot
                be read, the identity provider's keys are out of reach).
        """
        principal = await self._recognise(header)
        if (why := check_name(principal.name)) is not None:
            raise NameRefused(why)
        return principal

    async def _recognise(self, header: str) -> Principal:
        """The principal the credential of ``header`` stands for, by its shape."""
        # A header is bytes the client chose: surrogatepass encodes whatever it decoded to.
        given = header.encode("utf-8", "surrogatepass")
        if self._operator is not None and hmac.compare_digest(given, self._operator):
            return _OPERATOR  # constant time: no guessing by timing
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != "bearer" or not credential:
            raise CredentialRefused("send a credential as 'Authorization: Bearer TOKEN'")
        if self._file is not None and credential.startswith(TOKEN_PREFIX):
            return await self._checked("the token file", self._file.principal(credential))
        if self._jwt is not None and credential.count(".") == 2:
            return await self._checked("JWTs", self._jwt.principal(credential))
        raise CredentialRefused("unknown token")

    async def _checked(self, source: str, check: Awaitable[Principal]) -> Principal:
        """Await one source's check of a credential, logging its outages once each.

        A source that cannot check credentials (its key file unreadable, its provider out
        of reach) is logged when that starts, or its reason changes, and when it checks
        again (a principal, or a refusal); the 503s between are not logged one by one.
        """
        try:
            principal = await check
        except SignInUnavailable as exc:
            if self._outages.get(source) != exc.reason:
                _log.error("cannot check credentials against %s: %s", source, exc.reason)
                self._outages[source] = exc.reason
            raise
        except CredentialRefused:
            self._checking(source)
            raise
        self._checking(source)
        return principal

    def _checking(self, source: str) -> None:
        """``source`` checked a credential: if an outage of it was logged, log its end."""
        if self._outages.pop(source, None) is not None:
            _log.warning("%s can check credentials again", source)


def _unauthorized(detail: str) -> web.Response:
    response = problem(401, "Unauthorized", detail, code="unauthorized")
    response.headers.update(_CHALLENGE)
    return response


def forbidden(refusal: ScopeMissing) -> web.Response:
    """The 403 answer to a missing scope, naming it (``missing_scope``)."""
    return problem(
        403,
        "Forbidden",
        refusal.detail,
        code="missing_scope",
        extra={"missing_scope": refusal.scope},
    )


def _need(request: web.Request) -> str:
    route = request.match_info.route
    if request.match_info.http_exception is not None or route.resource is None:
        return SIGNED_IN  # no such route: say so only to someone signed in
    return ROUTE_SCOPES[(request.method, route.resource.canonical)]


async def _authenticate(
    request: web.Request, authenticator: Authenticator
) -> Principal | web.Response:
    header = request.headers.get("Authorization")
    if header is None:
        return _unauthorized("send a credential as 'Authorization: Bearer TOKEN'")
    address = request.remote or "-"
    throttle = authenticator.throttle
    wait = throttle.retry_after(address)
    if wait is not None:
        response = problem(
            429,
            "Too Many Requests",
            f"too many refused credentials from {address}; try again in {wait} s",
            code="too_many_requests",
        )
        response.headers["Retry-After"] = str(wait)
        return response
    try:
        return await authenticator.principal(header)
    except SignInUnavailable as exc:  # not the client's fault: neither 401 nor a failure
        response = problem(503, "Service Unavailable", exc.reason, code="sign_in_unavailable")
        response.headers["Retry-After"] = "5"
        return response
    except CredentialRefused as exc:
        throttle.failed(address)
        _log.warning("refused a credential from %s: %s", address, exc.reason)
        return _unauthorized(exc.reason)
    except NameRefused as exc:  # a good credential: not a guess, the throttle is not told
        _log.warning("refused a credential from %s: %s", address, exc.reason)
        return problem(403, "Forbidden", exc.reason, code="reserved_name")


AUTHENTICATOR: Final = web.AppKey("phasegraph.authenticator", Authenticator)
"""The app's :class:`Authenticator`, for what outlives the request that signed in."""


async def still_signed_in(request: web.Request) -> str | None:
    """Why the request's credential no longer gives its route's scope, or ``None`` if it does.

    The sign-in is checked once per request; an event stream lasts as long as its run, so
    it asks again as it goes: a token revoked or expired, or a scope taken away, ends it.
    An identity provider that cannot be reached is not the client's doing: the stream
    goes on.
    """
    authenticator = request.app[AUTHENTICATOR]
    if authenticator.open:
        return None
    try:
        principal = await authenticator.principal(request.headers.get("Authorization", ""))
    except SignInUnavailable:
        return None
    except (CredentialRefused, NameRefused) as exc:
        return exc.reason
    return _lacks(principal, _need(request))


def _lacks(principal: Principal, need: str) -> str | None:
    """Why ``principal`` may not do what a route ``need``s, or ``None`` if it may."""
    if need == SIGNED_IN or principal.allows(need):
        return None
    return f"{principal.name} lacks the scope {need!r} ({SCOPES[need]})"


def access_guard(authenticator: Authenticator) -> Any:
    """The middleware that authenticates each request and checks its route's scope."""

    @web.middleware
    async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
        need = _need(request)
        if need == PUBLIC:
            return await handler(request)
        if authenticator.open:
            principal: Principal | web.Response = _LOCAL
        else:
            principal = await _authenticate(request, authenticator)
        if isinstance(principal, web.Response):
            return principal
        if authenticator.read_only:
            principal = _reader(principal)
            if need not in _READS:
                return forbidden(ScopeMissing(need, _READ_ONLY))
        request[PRINCIPAL] = principal
        if (lacks := _lacks(principal, need)) is not None:
            return forbidden(ScopeMissing(need, lacks))
        return await handler(request)

    return access


_READS: Final = frozenset({SIGNED_IN, RUNS_READ})
_READ_ONLY: Final = (
    "this server only reads runs (serve --read-only): it starts, answers, resumes, cancels "
    "and forks none; ask the server or command line that drives them"
)


def _reader(principal: Principal) -> Principal:
    """``principal`` as a read-only server sees it: its read scope at most (``whoami`` too)."""
    reads = frozenset({RUNS_READ}) if principal.allows(RUNS_READ) else frozenset()
    return dataclasses.replace(principal, scopes=reads)


def require_start(request: web.Request, graph: str | None) -> None:
    """Refuse (403) a start the principal's ``runs:start:GRAPH`` scopes do not cover.

    ``graph`` is a built-in graph's name, or ``None`` for an uploaded graph (whose name
    its uploader chose, so only an unrestricted ``runs:start`` may start it).
    """
    principal = principal_of(request)
    if {ADMIN, RUNS_START} & principal.scopes:
        return
    if graph is not None and principal.allows(RUNS_START, graph):
        return
    scope = f"{RUNS_START}:{graph}" if graph else RUNS_START
    what = f"the graph {graph!r}" if graph else "an uploaded graph"
    raise ScopeMissing(scope, f"{principal.name} may not start {what}: that needs {scope!r}")


async def whoami(request: web.Request) -> web.Response:
    """Who the credential names, its groups and scopes (the viewer shows what they allow)."""
    principal = principal_of(request)
    return ok(
        {
            "name": principal.name,
            "groups": list(principal.groups),
            "scopes": sorted(principal.scopes),
            "source": principal.source,
        }
    )


def routes() -> list[web.RouteDef]:
    """This module's routes."""
    return [web.get("/whoami", whoami, allow_head=False)]


def check_table(app: web.Application) -> None:
    """Fail at start-up if a route is missing from :data:`ROUTE_SCOPES` (a bug, not input)."""
    for route in app.router.routes():
        key = (route.method, route.resource.canonical if route.resource else "")
        if key not in ROUTE_SCOPES:
            raise RuntimeError(f"route {key[0]} {key[1]} has no entry in ROUTE_SCOPES")
