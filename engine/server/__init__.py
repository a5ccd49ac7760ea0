"""The HTTP API: an aiohttp application over one :class:`~phasegraph.api.Engine`.

Owns ``aiohttp.web``. May import :mod:`phasegraph.api` and everything below it.
"""

from __future__ import annotations

from phasegraph.server._app import ServerSettings, create_app

__all__ = [
    "ServerSettings",
    "create_app",
]
