"""mcp-server-time over the MCP SDK's streamable HTTP transport, for the MCP tests.

Run as ``python mcp_time_http.py LOG``: serves the real time server (the package from
PyPI, which speaks only stdio on its own) on a free port of 127.0.0.1, says where on its
first line of stderr (uvicorn's "running on" line), and appends to ``LOG`` one JSON line
per request naming its ``Idempotency-Key`` header and the ``_meta`` of its body.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import uvicorn
from mcp_server_time.server import create_server

Scope = dict[str, Any]


class Recorder:
    """Pure ASGI layer: records what a tool call carried, then hands the request on."""

    def __init__(self, app: Any, log: str) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        params = json.loads(body).get("params") or {}
        line = {
            "method": json.loads(body).get("method"),
            "idempotency_key": headers.get("idempotency-key"),
            "meta": params.get("_meta"),
            "x_run": headers.get("x-run"),
        }
        with open(self.log, "a", encoding="utf-8") as out:  # noqa: ASYNC230 (a test log)
            out.write(json.dumps(line) + "\n")
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


if __name__ == "__main__":
    app = create_server("UTC").streamable_http_app()
    uvicorn.run(Recorder(app, sys.argv[1]), host="127.0.0.1", port=0, log_level="info")
