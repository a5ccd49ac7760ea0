"""The HTTP API: an aiohttp application over one :class:`~phasegraph.api.Engine`.

Owns ``aiohttp.web``. May import :mod:`phasegraph.api` and everything below it.
"""

from __future__ import annotations

from phasegraph.server._app import (
    PUBLIC_PATHS,
    STATUS_FOR,
    ServerSettings,
    create_app,
    problem,
)

__all__ = [
    "PUBLIC_PATHS",
    "STATUS_FOR",
    "ServerSettings",
    "create_app",
    "problem",
]
