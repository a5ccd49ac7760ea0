"""Browser safety: no web page the user visits can drive or read the server.

A page can send a "simple" cross-origin POST (``text/plain``, a form) without a CORS
preflight, and DNS rebinding lets a page on a name it controls read the server's answers.
So, before any route runs: the ``Host`` must be a name the server is bound to (or one the
operator allows), a request that carries an ``Origin`` must come from the server's own
origin (or one the operator allows), and a body must be declared ``application/json`` —
a type no page can send cross-origin without a preflight this server never approves.
Clients that are not browsers (curl, the CLI, scripts) send no ``Origin`` and are unaffected.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

__all__ = ["browser_guard"]

_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})
_WITH_BODY: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _name_of(host: str) -> str:
    """``host`` without its port."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


def _own_hosts(request: web.Request, bind: str) -> set[str]:
    """The ``Host`` values naming this server: its bind name and the address it was reached on."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    names = {_bracketed(bind.lower())}
    if _is_loopback(bind):
        names |= _LOOPBACK_NAMES
    if sockname:
        names.add(_bracketed(str(sockname[0]).lower()))
        port = int(sockname[1])
        return {f"{name}:{port}" for name in names} | (names if port == 80 else set())
    return names


def browser_guard(bind: str, allowed_hosts: frozenset[str], allowed_origins: frozenset[str]) -> Any:
    """The middleware that refuses requests a web page could have made.

    Args:
        bind: The address or name the server is bound to (``--host``).
        allowed_hosts: More ``Host`` values to accept (``name`` for any port, or
            ``name:port``), e.g. the name of a reverse proxy in front of the server.
        allowed_origins: Origins (``scheme://host[:port]``) whose pages may call the server.

    Returns:
        An aiohttp middleware.
    """
    hosts = {host.lower() for host in allowed_hosts}
    origins = {origin.lower().rstrip("/") for origin in allowed_origins}

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Host", "").lower()
        if not (given in hosts or _name_of(given) in hosts or given in _own_hosts(request, bind)):
            raise web.HTTPMisdirectedRequest(
                text=f"Host {given!r:.100} is not a name of this server: use the address it "
                "is bound to, or start it with --allowed-host NAME"
            )
        origin = request.headers.get("Origin")
        if origin is not None:
            own = f"{request.scheme}://{given}"
            if origin.lower().rstrip("/") not in origins | {own}:
                raise web.HTTPForbidden(
                    text=f"requests from origin {origin!r:.100} are refused: start the server "
                    "with --allowed-origin ORIGIN to let that site's pages call it"
                )
        declared = request.content_type
        if request.method in _WITH_BODY and request.body_exists and declared != "application/json":
            raise web.HTTPUnsupportedMediaType(
                text=f"send the body as JSON with 'Content-Type: application/json' "
                f"(not {request.content_type!r:.100})"
            )
        return await handler(request)

    return guard
