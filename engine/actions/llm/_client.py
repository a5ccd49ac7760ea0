"""One chat-completion call with the official ``openai`` async client (its only importer).

Calls to one endpoint share one client and its keep-alive connections (kept by
:mod:`phasegraph.actions.llm._pool`, closed with the engine); the request's timeout and
retries travel with each request. The client's own retries are used for what they are
good at: ``429``, ``408``, ``409``, ``5xx``, dropped connections and timeouts are retried
``retries`` times, waiting what ``Retry-After`` asks. What still fails becomes a
:class:`ProviderError`, classified for the ``error`` trigger:

- ``429``, ``5xx``, ``408``, timeouts, lost connections: retryable (``llm_failure``), with
  ``retry_after`` when the provider said how long to wait;
- a context-length refusal: ``context_length`` is set (the action compresses instead);
- any other ``4xx``: not retryable, with the provider's message;
- an answer that is not a chat completion (invalid JSON, an HTML page with status 200,
  a choice without a message, no choices, a ``data:`` line that is not JSON) or a stream
  cut before the model finished: ``llm_failure`` naming the model, the endpoint and an
  excerpt of what came back, retried here (the client does not) ``retries`` times like a
  lost connection.

The API key never appears in a message: every text taken from the provider is masked.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from phasegraph.actions._failures import ProviderError
from phasegraph.actions.llm._pool import loop_pool

__all__ = ["ChatRequest", "Completion", "Endpoint", "ProviderError", "complete", "warm_up"]

_MASK: Final = "***"
_CONTEXT_CODES: Final = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_WORDS: Final = ("maximum context length", "context length", "context window")
_EXCERPT_CHARS: Final = 200
_RETRY_WAIT: Final = 0.25
"""Seconds before the first retry of a malformed answer; doubled for each next one."""
_KEEP_ALIVE: Final = 30.0
"""Seconds an idle connection is kept for the next call (httpx's default is 5): an agent's
tool calls often take longer than that between two turns."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """Where requests go. The key is kept out of ``repr`` and every message."""

    base_url: str | None
    api_key: str = field(repr=False)
    model: str | None = None
    """A model that replaces the binding's main model (``PHASEGRAPH_LLM_MODEL``)."""

    def mask(self, text: str) -> str:
        """``text`` with the key replaced by ``***``."""
        return text.replace(self.api_key, _MASK) if len(self.api_key) >= 4 else text

    @property
    def shown(self) -> str:
        """The endpoint as messages name it."""
        return self.base_url or "the OpenAI API"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """One chat-completion request."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = 120.0
    retries: int = 2
    stream: bool = False
    tool_choice: str | None = None
    """``auto``, ``none``, ``required`` or the name of the tool to call."""
    parallel_tool_calls: bool | None = None
    response_format: Mapping[str, Any] | None = None
    """As the API takes it: ``{type: json_schema, json_schema: {name, schema, strict}}``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """What the model answered.

    Attributes:
        message: The assistant message as a chat message (``role``, ``content``,
            ``tool_calls`` when it called tools).
        finish_reason: Why the model stopped (``stop``, ``tool_calls``, ``length``...).
        usage: ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` (0 when the
            provider reported none).
        model: The model that answered.
        id: The provider's completion id.
    """

    message: Mapping[str, Any]
    finish_reason: str
    usage: Mapping[str, int]
    model: str
    id: str


@functools.cache
def _tls() -> ssl.SSLContext:
    """The process's one TLS context for model clients.

    Building one (loading the system's certificates) is most of a client's set-up cost,
    tens of milliseconds; a context is safe to share among the clients of every loop.
    """
    return ssl.create_default_context()


@functools.cache
def warm_up() -> None:
    """Import, once, what a client's first request would: its HTTP transport.

    Called when a graph with ``llm:`` bindings is prepared, so that the first turn costs
    a turn; building an HTTP client imports its transport and opens nothing.
    """
    openai.DefaultAsyncHttpxClient()


async def _open_client(endpoint: Endpoint) -> openai.AsyncOpenAI:
    # Limits of the client's own HTTP library (httpx), reached through openai's defaults.
    limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
        max_connections=1000, max_keepalive_connections=100, keepalive_expiry=_KEEP_ALIVE
    )
    return openai.AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or "unset",
        http_client=openai.DefaultAsyncHttpxClient(verify=_tls(), limits=limits),
    )


async def _close_client(client: openai.AsyncOpenAI) -> None:
    await client.close()


def _arguments(request: ChatRequest) -> dict[str, Any]:
    arguments: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
    if request.tools:
        arguments["tools"] = list(request.tools)
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    if request.max_tokens is not None:
        arguments["max_tokens"] = request.max_tokens
    if request.tool_choice in ("auto", "none", "required"):
        arguments["tool_choice"] = request.tool_choice
    elif request.tool_choice is not None:
        arguments["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
    if request.parallel_tool_calls is not None:
        arguments["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        arguments["response_format"] = dict(request.response_format)
    if request.stream:
        arguments["stream"] = True
        arguments["stream_options"] = {"include_usage": True}
    return arguments


async def complete(
    endpoint: Endpoint, request: ChatRequest, on_delta: Callable[[str], None] | None = None
) -> Completion:
    """Send ``request`` and return the answer; ``on_delta`` sees streamed text as it comes.

    Raises:
        ProviderError: The provider refused or failed the request (after retries).
    """
    for attempt in range(request.retries + 1):
        try:
            return await _attempt(endpoint, request, on_delta)
        except MalformedAnswerError:
            if attempt == request.retries:
                raise
            await asyncio.sleep(_RETRY_WAIT * 2**attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _attempt(
    endpoint: Endpoint, request: ChatRequest, on_delta: Callable[[str], None] | None
) -> Completion:
    where = f"model {request.model!r} at {endpoint.shown}"
    options: Any = {"timeout": request.timeout, "max_retries": request.retries}
    pool = await loop_pool()
    key = ("openai", endpoint.base_url, endpoint.api_key)
    try:
        async with pool.use(key, lambda: _open_client(endpoint), _close_client) as client:
            # Posted as it is: `chat.completions.create` first walks the whole body through
            # its type-driven transform, which for plain JSON messages changes nothing and
            # costs about 2 ms per message on a loaded machine (0.2 s a call at 80 messages,
            # growing with the conversation), against under 1 ms to encode it all. The
            # answer is read as text and parsed once, here, so whatever came back can be
            # quoted.
            if request.stream:
                stream = await client.post(
                    "/chat/completions",
                    body=_arguments(request),
                    cast_to=ChatCompletion,
                    options=options,
                    stream=True,
                    stream_cls=openai.AsyncStream[ChatCompletionChunk],
                )
                try:
                    return await _collect(stream, request.model, on_delta, endpoint, where)
                finally:  # an answer given up half-read gives its connection back too
                    await stream.close()
            text = await client.post(
                "/chat/completions", body=_arguments(request), cast_to=str, options=options
            )
            return _completion(text, endpoint, where)
    except openai.APIError as exc:
        raise _provider_error(exc, endpoint, request.model) from None


class MalformedAnswerError(ProviderError):
    """The provider answered, but not with a chat completion: retried like a lost connection."""


def _malformed(endpoint: Endpoint, where: str, what: str, text: str) -> MalformedAnswerError:
    excerpt = " ".join(endpoint.mask(text).split())[:_EXCERPT_CHARS]
    return MalformedAnswerError(
        f"{where} answered with {what}, not a chat completion: {excerpt!r}", retryable=True
    )


def _completion(text: str, endpoint: Endpoint, where: str) -> Completion:
    try:
        answer = json.loads(text)
    except ValueError:
        what = "an HTML page" if text.lstrip().startswith("<") else "invalid JSON"
        raise _malformed(endpoint, where, what, text) from None
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices:
        raise _malformed(endpoint, where, "no choices", text)
    choice = choices[0]
    raw = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(raw, dict):
        raise _malformed(endpoint, where, "a choice without a message", text)
    message: dict[str, Any] = {"role": "assistant", "content": raw.get("content")}
    if raw.get("tool_calls") is not None:
        message["tool_calls"] = raw["tool_calls"]
    if raw.get("refusal"):  # the model declined to answer in the asked format
        message["refusal"] = str(raw["refusal"])
    return Completion(
        message=message,
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=_usage(answer.get("usage")),
        model=str(answer.get("model") or ""),
        id=str(answer.get("id") or ""),
    )


def _usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    if not isinstance(usage, Mapping):
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    total = int(usage.get("total_tokens") or prompt + completion)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


@dataclass(slots=True)
class _Assembly:
    """A streamed answer being put back together."""

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    model: str = ""
    id: str = ""

    def add_call(self, delta: Any) -> None:
        call = self.calls.setdefault(
            int(delta.index),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if delta.id:
            call["id"] = delta.id
        function = delta.function
        if function is not None:
            call["function"]["name"] += function.name or ""
            call["function"]["arguments"] += function.arguments or ""

    def completion(self) -> Completion:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[index] for index in sorted(self.calls)]
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        return Completion(
            message=message,
            finish_reason=self.finish_reason or "stop",
            usage=_usage(self.usage),
            model=self.model,
            id=self.id,
        )


async def _collect(
    stream: Any,
    model: str,
    on_delta: Callable[[str], None] | None,
    endpoint: Endpoint,
    where: str,
) -> Completion:
    assembly = _Assembly(model=model)
    chunks = aiter(stream)
    while (chunk := await _next_chunk(chunks, endpoint, where)) is not None:
        assembly.id = chunk.id or assembly.id
        assembly.model = chunk.model or assembly.model
        if chunk.usage is not None:
            assembly.usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                assembly.text.append(delta.content)
                if on_delta is not None:
                    on_delta(delta.content)
            if getattr(delta, "refusal", None):
                assembly.refusal.append(delta.refusal)
            for call in delta.tool_calls or ():
                assembly.add_call(call)
            if choice.finish_reason:
                assembly.finish_reason = str(choice.finish_reason)
    if assembly.finish_reason is None:  # ended without the model saying why: cut short
        said = "".join(assembly.text)
        raise _malformed(endpoint, where, "a stream that ended before the answer did", said)
    return assembly.completion()


async def _next_chunk(chunks: Any, endpoint: Endpoint, where: str) -> Any:
    """The stream's next chunk, ``None`` at its end; a broken stream is a malformed answer."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except openai.APIConnectionError as exc:  # the connection broke (or stalled) mid-answer
        what = f"a stream cut mid-answer ({type(exc).__name__})"
        raise _malformed(endpoint, where, what, str(exc.__cause__ or exc)) from None
    except openai.APIError:
        raise
    except ValueError as exc:  # the SSE decoder met a `data:` line that is not JSON
        line = str(getattr(exc, "doc", exc))  # a JSONDecodeError keeps the text it read
        raise _malformed(endpoint, where, "a stream line that is not JSON", line) from None
    except Exception as exc:  # the transport's own error: the connection broke mid-answer
        what = f"a stream cut mid-answer ({type(exc).__name__})"
        raise _malformed(endpoint, where, what, str(exc)) from None


def _retry_after(response: Any) -> float | None:
    if response is None:
        return None
    headers = response.headers
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / scale
        except ValueError:
            continue
    return None


def _provider_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        return json.dumps(body, default=str)[:500]
    return str(exc.message or type(exc).__name__)


def _is_context_length(exc: openai.APIError, message: str) -> bool:
    if getattr(exc, "code", None) in _CONTEXT_CODES:
        return True
    return isinstance(exc, openai.BadRequestError) and any(
        word in message.lower() for word in _CONTEXT_WORDS
    )


def _provider_error(exc: openai.APIError, endpoint: Endpoint, model: str) -> ProviderError:
    where = f"model {model!r} at {endpoint.shown}"
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(f"{where} did not answer in time", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = endpoint.mask(str(exc.__cause__ or exc.message or "connection failed"))
        return ProviderError(f"{where} cannot be reached: {cause}", retryable=True)
    message = endpoint.mask(_provider_message(exc))
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if isinstance(status, int) and _is_context_length(exc, message):
        return ProviderError(
            f"{where}: the conversation is over the context window: {message}",
            status=status,
            retryable=False,
            context_length=True,
        )
    retryable = not isinstance(status, int) or status in (408, 409, 429) or status >= 500
    return ProviderError(
        f"{where} answered {status}: {message}",
        status=status if isinstance(status, int) else None,
        retryable=retryable,
        retry_after=_retry_after(response) if retryable else None,
    )
