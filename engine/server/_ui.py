"""The run viewer at ``/ui``: static files shipped in the package, served as they are.

The page (``engine/server/ui/``: hand-written HTML, CSS and JavaScript modules, no build
step, nothing fetched from elsewhere) talks to the documented JSON API and event stream
with the bearer token the user types in, so serving it needs no token: the files hold no
run data. They are read once when the app is built, sent with an ETag, and with a
Content-Security-Policy that lets them load only from this server and run no inline
script — run data is shown as text, never as markup.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Final

from aiohttp import web

__all__ = ["UI_PREFIX", "routes"]

UI_PREFIX: Final = "/ui"
"""Where the viewer is served; these paths need no token (see ``_access.ROUTE_SCOPES``)."""

_TYPES: Final = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_INDEX: Final = "index.html"
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate with the ETag: a new version shows at once
}


@dataclass(frozen=True, slots=True)
class _Asset:
    body: bytes
    content_type: str
    etag: str


def _load() -> dict[str, _Asset]:
    folder = resources.files("phasegraph.server").joinpath("ui")
    assets = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            assets[entry.name] = _Asset(body, _TYPES[suffix], etag)
    return assets


def _send(request: web.Request, asset: _Asset) -> web.Response:
    headers = {**_HEADERS, "ETag": asset.etag}
    if request.headers.get("If-None-Match") == asset.etag:
        return web.Response(status=304, headers=headers)
    response = web.Response(
        body=asset.body, content_type=asset.content_type, charset="utf-8", headers=headers
    )
    response.enable_compression()  # gzip when the browser takes it: ~60 KB become ~19 KB
    return response


def routes() -> list[web.RouteDef]:
    """The viewer's routes: the page at ``/ui`` (and ``/ui/``) and its files at ``/ui/{name}``.

    The page names its files by absolute paths, so it works at either address.
    """
    assets = _load()

    async def page(request: web.Request) -> web.Response:
        """The viewer's page."""
        return _send(request, assets[_INDEX])

    async def asset(request: web.Request) -> web.Response:
        """One of the viewer's files (scripts, styles)."""
        found = assets.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(text=f"the viewer has no file {request.path!r:.100}")
        return _send(request, found)

    return [
        web.get(UI_PREFIX, page, allow_head=False),
        web.get(UI_PREFIX + "/", page, allow_head=False),
        web.get(UI_PREFIX + "/{name}", asset, allow_head=False),
    ]
