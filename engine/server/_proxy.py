"""Behind a reverse proxy: which forwarded headers the server believes (``--trust-proxy``).

A proxy that terminates TLS and forwards plain HTTP hides two things from the server: the
client's address (which failed sign-ins are counted against) and the scheme the browser
used (which the browser guard compares a request's ``Origin`` with). With ``trust_proxy``
the server reads them from the last entry of ``X-Forwarded-For`` (the address the proxy
saw) and from ``X-Forwarded-Proto``. Without it, both headers are ignored: any client can
send them. ``X-Forwarded-Host`` is never believed; name the proxy with ``--allowed-host``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

__all__ = ["forwarded_by_proxy"]


def _address(value: str) -> str | None:
    text = value.strip()
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return None  # not an address: the proxy's own peer address stands


def forwarded_by_proxy() -> Any:
    """The middleware that takes the client's address and scheme from the proxy's headers."""

    @web.middleware
    async def forwarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        chain = request.headers.get("X-Forwarded-For")
        remote = _address(chain.rsplit(",", 1)[-1]) if chain else None
        proto = request.headers.get("X-Forwarded-Proto", "").strip().lower()
        scheme = proto if proto in ("http", "https") else None
        if remote is not None:
            request = request.clone(remote=remote)
        if scheme is not None:
            request = request.clone(scheme=scheme)
        return await handler(request)

    return forwarded
