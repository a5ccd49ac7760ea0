"""A scripted model: an aiohttp server speaking the Chat Completions API from a script.

Tests drive the real ``openai`` client against it over a loopback socket, and the
offline examples answer from a shipped script. Each entry of the script is one answer:

- ``{content: TEXT}``: an assistant message;
- ``{refusal: TEXT}``: the model declines to answer (the API's ``refusal`` field);
- ``{tool_calls: [{name: NAME, arguments: {...}}, ...], content: TEXT?}``: tool calls;
- ``{error: 429 | 500 | ..., message: TEXT?, retry_after: SECONDS?}``: an error status
  (``Retry-After`` sent when given);
- ``{error: context_length}``: the provider's context-length refusal (400,
  ``context_length_exceeded``);
- ``{fault: MODE}``: an answer that is not a chat completion, for testing what the
  client does with one: ``invalid_json`` and ``html`` (status 200), ``no_message`` (a
  choice without a message), ``no_choices``, ``garbage_line`` (a streamed answer with
  a ``data:`` line that is not JSON) and ``cut_stream`` (the connection closed
  mid-answer); the last two, asked without streaming, send invalid JSON and a body cut
  short;
- a streamed entry may add ``hold_after: N``: after N pieces of its text the stream
  waits until the test calls :meth:`ScriptedModelServer.release_streams` (a turn held in
  flight, under the test's control; :attr:`ScriptedModelServer.held` is set once one is);
- any entry may add ``delay: SECONDS`` (a slow answer), ``usage: {prompt_tokens,
  completion_tokens}`` (default: about four characters a token) and ``model: NAME``
  (the entry answers only requests for that model; others skip it).

A server made with ``held=True`` answers nothing until a test lets it: each
:meth:`ScriptedModelServer.release` lets one answer go, and :meth:`~ScriptedModelServer.received`
waits until a number of requests came, so a test drives a slow model step by step
instead of sleeping.

Entries are taken in order (the first unused one whose ``model`` fits); with
``by_turn=True`` the entry is picked by the request instead: the N-th fitting entry for a
conversation holding N assistant messages (a compression summary counts for the answers
it summarizes), so a resumed run that asks again for a turn gets the same answer. With
``max_context=N`` a request whose messages exceed about N tokens gets the context-length
error whatever the script says.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self, final

from aiohttp import web

from phasegraph.actions.llm._measure import estimate_tokens, summarized_turns

__all__ = ["ScriptedModelServer"]

_CONTEXT_LENGTH: Final = "context_length"


def _error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@dataclass(slots=True)
class _Entry:
    spec: Mapping[str, Any]
    used: bool = False


@dataclass(slots=True)
class _Log:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    requests: int = 0
    connections: int = 0
    seen: weakref.WeakSet[asyncio.BaseTransport] = field(default_factory=weakref.WeakSet)

    def request(self, transport: asyncio.BaseTransport | None) -> None:
        self.requests += 1
        if transport is not None and transport not in self.seen:
            self.seen.add(transport)
            self.connections += 1


@final
class ScriptedModelServer:
    """An OpenAI-compatible chat-completions server answering from a script.

    Use as ``async with ScriptedModelServer(script) as server:`` and point a client at
    :attr:`base_url`. Every request body is kept in :attr:`requests`.

    Args:
        script: The answers, in order (see the module docstring for the entry format).
        by_turn: Pick the answer by the conversation's number of assistant messages
            instead of by arrival (and number answers by turn, not by arrival).
        record: Keep every request's body and ``Authorization`` header (what tests
            read); a server kept for many calls does not.
        max_context: Refuse requests over about this many tokens (context-length error).
        host: Interface to listen on (loopback by default).
        port: Port (0: a free one).
        held: Hold every answer until :meth:`release` lets it go.
    """

    def __init__(
        self,
        script: Sequence[Mapping[str, Any]],
        *,
        by_turn: bool = False,
        record: bool = True,
        max_context: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        held: bool = False,
    ) -> None:
        self._entries = [_Entry(dict(spec)) for spec in script]
        self._held = asyncio.Semaphore(0) if held else None
        self._came: asyncio.Condition | None = None  # made on the server's loop
        self._by_turn = by_turn
        self._record = record
        self._max_context = max_context
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self._log = _Log()
        self._ids = 0
        self._release = asyncio.Event()
        self.held = asyncio.Event()
        """Set when a stream reaches its ``hold_after`` and waits for :meth:`release_streams`."""

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Listen (on a free port unless one was given)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/chat/completions", self._complete)
        # A client that gives up (a timeout, a killed process) cancels its handler, so a
        # slow answer never holds the server's shutdown.
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self._port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner

    async def aclose(self) -> None:
        """Stop listening (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.shield(runner.cleanup())

    # -- what tests read ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The API root to give a client: ``http://HOST:PORT/v1``."""
        return f"http://{self._host}:{self._port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received, in order."""
        return list(self._log.bodies)

    @property
    def authorizations(self) -> list[str]:
        """The ``Authorization`` header of every request (a test's own keys only)."""
        return list(self._log.authorizations)

    @property
    def request_count(self) -> int:
        """How many requests were received."""
        return self._log.requests

    @property
    def connections(self) -> int:
        """How many connections requests came on (a client that keeps one alive: 1)."""
        return self._log.connections

    @property
    def open_connections(self) -> int:
        """How many connections are open now (clients that closed theirs are gone)."""
        server = self._runner.server if self._runner is not None else None
        return 0 if server is None else len(server.connections)

    @property
    def remaining(self) -> int:
        """Script entries not used yet (``by_turn`` scripts never use entries up)."""
        return sum(not entry.used for entry in self._entries)

    def release(self, answers: int = 1) -> None:
        """Let ``answers`` held answers go (a server made with ``held=True``)."""
        if self._held is None:
            raise RuntimeError("the server holds no answers: make it with held=True")
        for _ in range(answers):
            self._held.release()

    async def received(self, count: int) -> None:
        """Wait until at least ``count`` requests came (answered or held)."""
        came = self._came = self._came or asyncio.Condition()
        async with came:
            await came.wait_for(lambda: self._log.requests >= count)

    def release_streams(self) -> None:
        """Let every held stream (``hold_after``) go on, now and later."""
        self._release.set()

    # -- serving -----------------------------------------------------------------------

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _json(400, _error_body("the body is not JSON", "invalid_request_error", None))
        self._log.request(request.transport)
        if self._record:
            self._log.bodies.append(body)
            self._log.authorizations.append(request.headers.get("Authorization", ""))
        if self._came is not None:
            async with self._came:
                self._came.notify_all()
        if self._held is not None:
            await self._held.acquire()  # a client that gives up cancels this wait
        model = str(body.get("model", ""))
        entry = self._pick(body, model)
        if entry is None:
            message = f"the script has no answer for request {self.request_count} ({model})"
            return _json(400, _error_body(message, "invalid_request_error", "script_exhausted"))
        await asyncio.sleep(float(entry.get("delay", 0)))
        too_long = self._over_context(body)
        if too_long or entry.get("error") == _CONTEXT_LENGTH:
            return _context_length(self._max_context, body)
        if "error" in entry:
            return _failure(entry)
        self._ids += 1
        number = summarized_turns(body.get("messages", ())) + 1 if self._by_turn else self._ids
        answer = _Answer.of(entry, body, model, f"chatcmpl-{number}")
        if "fault" in entry:
            return await _fault(str(entry["fault"]), answer, request, bool(body.get("stream")))
        if body.get("stream"):
            return await answer.stream(request, body, self._hold(entry))
        return web.json_response(answer.completion())

    def _hold(self, entry: Mapping[str, Any]) -> tuple[int, Callable[[], Awaitable[None]]] | None:
        if "hold_after" not in entry:
            return None

        async def wait() -> None:
            self.held.set()
            await self._release.wait()

        return int(entry["hold_after"]), wait

    def _pick(self, body: Mapping[str, Any], model: str) -> Mapping[str, Any] | None:
        fitting = [e for e in self._entries if e.spec.get("model") in (None, model)]
        if self._by_turn:
            turn = summarized_turns(body.get("messages", ()))
            return fitting[turn].spec if turn < len(fitting) else None
        entry = next((e for e in fitting if not e.used), None)
        if entry is None:
            return None
        entry.used = True
        return entry.spec

    def _over_context(self, body: Mapping[str, Any]) -> int:
        if self._max_context is None:
            return 0
        tokens = estimate_tokens(body.get("messages", []))
        return tokens if tokens > self._max_context else 0


def _json(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def _context_length(limit: int | None, body: Mapping[str, Any]) -> web.Response:
    asked = estimate_tokens(body.get("messages", []))
    message = (
        f"This model's maximum context length is {limit or asked - 1} tokens. However, "
        f"your messages resulted in {asked} tokens. Please reduce the length of the messages."
    )
    return _json(400, _error_body(message, "invalid_request_error", "context_length_exceeded"))


def _failure(entry: Mapping[str, Any]) -> web.Response:
    status = int(entry["error"])
    headers: dict[str, str] = {}
    if "retry_after" in entry:
        wait = float(entry["retry_after"])
        headers["Retry-After"] = str(math.ceil(wait))
        headers["retry-after-ms"] = str(int(wait * 1000))
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "error"
    message = str(entry.get("message") or f"scripted {status} error")
    return _json(status, _error_body(message, kind, None), headers)


_HTML = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


async def _fault(
    mode: str, answer: _Answer, request: web.Request, stream: bool
) -> web.StreamResponse:
    """Answer with ``mode``'s kind of broken answer (see the module docstring)."""
    completion = answer.completion()
    if mode == "html":
        return web.Response(body=_HTML, content_type="text/html")
    if mode == "no_message":
        del completion["choices"][0]["message"]
        return web.json_response(completion)
    if mode == "no_choices":
        return web.json_response({**completion, "choices": []})
    if mode == "invalid_json" or not stream:
        body = json.dumps(completion).encode()[:40]  # cut_stream: a body cut short
        if mode == "cut_stream":
            return await _cut(request, body, headers={"Content-Length": str(len(body) * 2)})
        return web.Response(body=body, content_type="application/json")
    first, second, *_ = answer.deltas()
    if mode == "garbage_line":
        return await _cut(request, first + b"data: <html>upstream hiccup</html>\n\n", end=True)
    if mode == "cut_stream":
        return await _cut(request, first + second)
    raise ValueError(f"unknown scripted fault {mode!r}")


async def _cut(
    request: web.Request,
    body: bytes,
    *,
    headers: Mapping[str, str] | None = None,
    end: bool = False,
) -> web.StreamResponse:
    """Send ``body``, then end the answer properly (``end``) or drop the connection."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **(headers or {})})
    await response.prepare(request)
    await response.write(body)
    if end:
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    elif request.transport is not None:
        request.transport.close()
    return response


@dataclass(frozen=True, slots=True)
class _Answer:
    id: str
    model: str
    content: str | None
    tool_calls: tuple[dict[str, Any], ...]
    usage: dict[str, int]
    refusal: str | None = None

    @classmethod
    def of(cls, entry: Mapping[str, Any], body: Mapping[str, Any], model: str, id: str) -> _Answer:
        calls = tuple(
            {
                "id": f"call_{id.rpartition('-')[2]}_{index}",
                "type": "function",
                "function": {
                    "name": str(call["name"]),
                    "arguments": json.dumps(call.get("arguments", {}), sort_keys=True),
                },
            }
            for index, call in enumerate(entry.get("tool_calls") or ())
        )
        content = entry.get("content")
        given = dict(entry.get("usage") or {})
        prompt = int(given.get("prompt_tokens", estimate_tokens(body.get("messages", []))))
        said: Any = [content or "", *calls] if calls else content or ""
        completion = int(given.get("completion_tokens", estimate_tokens(said)))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        refusal = None if entry.get("refusal") is None else str(entry["refusal"])
        return cls(id, model, None if content is None else str(content), calls, usage, refusal)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = list(self.tool_calls)
        if self.refusal is not None:
            message["refusal"] = self.refusal
        return message

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {"index": 0, "message": self.message(), "finish_reason": self.finish_reason}
            ],
            "usage": self.usage,
        }

    def _chunk(self, delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def deltas(self) -> list[bytes]:
        parts = [self._chunk({"role": "assistant", "content": ""})]
        # Word by word, spaces kept, so the deltas join back into the exact text.
        for word in _pieces(self.content or ""):
            parts.append(self._chunk({"content": word}))
        if self.refusal is not None:
            parts.append(self._chunk({"refusal": self.refusal}))
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            head = {"index": index, "id": call["id"], "type": "function"}
            first = {**head, "function": {"name": function["name"], "arguments": ""}}
            parts.append(self._chunk({"tool_calls": [first]}))
            for piece in _halves(function["arguments"]):
                more = {"index": index, "function": {"arguments": piece}}
                parts.append(self._chunk({"tool_calls": [more]}))
        parts.append(self._chunk({}, self.finish_reason))
        return parts

    async def stream(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        hold: tuple[int, Callable[[], Awaitable[None]]] | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, part in enumerate(self.deltas()):
            if hold is not None and index == hold[0] + 1:  # the role chunk, then N pieces
                await hold[1]()
            await response.write(part)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": self.model,
                "choices": [],
                "usage": self.usage,
            }
            await response.write(f"data: {json.dumps(usage)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _pieces(text: str) -> list[str]:
    pieces: list[str] = []
    for word in text.split(" "):
        pieces.append(word if not pieces else " " + word)
    return [p for p in pieces if p]


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [p for p in (text[:middle], text[middle:]) if p]
