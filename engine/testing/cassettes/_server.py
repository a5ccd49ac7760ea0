"""Model answers from a cassette, served as an OpenAI-compatible endpoint on loopback.

A test points each ``llm:`` call at ``{base_url}/{node}/{hook}/{turn}`` (the player
rewrites the call's ``with.llm``), so the real client sends the request the current graph
builds and gets the message the recording kept for that node, hook and turn, verbatim
(its tool-call ids included, so the conversation goes on as it did). A call the cassette
has no answer for gets a 400 naming it, and is noted in :attr:`CassetteModel.missing`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self, final
from urllib.parse import quote

from aiohttp import web

from phasegraph.testing.cassettes._format import Cassette, Entry

__all__ = ["CassetteModel"]


def _error(status: int, message: str, code: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return web.json_response(body, status=status)


@final
class CassetteModel:
    """Answers model calls with a cassette's recorded messages.

    Use as ``async with CassetteModel(cassette) as model:`` and give each call
    :meth:`base_url_for` its node, hook and turn.
    """

    def __init__(self, cassette: Cassette) -> None:
        self._answers: dict[tuple[str, str, int], Entry] = {
            (e.node, e.hook, e.turn): e for e in cassette.entries if e.kind == "llm"
        }
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.missing: list[tuple[str, str, int]] = []
        """The calls (node, hook, turn) asked for that the cassette had no answer for."""

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/{node}/{hook}/{turn}/chat/completions", self._complete)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.shield(runner.cleanup())

    def base_url_for(self, node: str, hook: str, turn: int) -> str:
        """The endpoint that answers the node's hook's ``turn``-th call."""
        path = "/".join(quote(part, safe="") for part in (node, hook, str(turn)))
        return f"http://127.0.0.1:{self._port}/{path}"

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        key = (info["node"], info["hook"], int(info["turn"]))
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON", "invalid_json")
        entry = self._answers.get(key)
        if entry is None:
            self.missing.append(key)
            where = f"node {key[0]!r}, hook {key[1]!r}, turn {key[2]}"
            return _error(
                400, f"the cassette has no model answer for {where}", "cassette_no_answer"
            )
        if "error" in entry.answer or "message" not in entry.answer:
            reason = str(entry.answer.get("error") or "the recorded call failed")
            return _error(400, reason, "cassette_recorded_error")
        message = dict(entry.answer["message"])
        completion = _completion(entry, message, str(body.get("model", "")))
        if body.get("stream"):
            return await _stream(request, completion, message)
        return web.json_response(completion)


def _completion(entry: Entry, message: Mapping[str, Any], model: str) -> dict[str, Any]:
    usage = dict(entry.answer.get("usage") or {})
    usage.setdefault("prompt_tokens", 0)
    usage.setdefault("completion_tokens", 0)
    usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    return {
        "id": f"cassette-{entry.at}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": usage,
    }


async def _stream(
    request: web.Request, completion: Mapping[str, Any], message: Mapping[str, Any]
) -> web.StreamResponse:
    """The completion as one streamed chunk, its end, and its usage."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    base = {k: completion[k] for k in ("id", "created", "model")}
    finish = completion["choices"][0]["finish_reason"]
    chunks = [
        {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]},
        {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
        },
        {**base, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]},
    ]
    for chunk in chunks:
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
