"""One chat-completion call with the official ``openai`` async client (its only importer).

A call opens its own client and closes it before returning, so nothing outlives the
step (as with ``http:`` actions). The client's own retries are used for what they are
good at: ``429``, ``408``, ``409``, ``5xx``, dropped connections and timeouts are retried
``retries`` times, waiting what ``Retry-After`` asks. What still fails becomes a
:class:`ProviderError`, classified for the ``error`` trigger:

- ``429``, ``5xx``, ``408``, timeouts, lost connections: retryable (``llm_failure``), with
  ``retry_after`` when the provider said how long to wait;
- a context-length refusal: ``context_length`` is set (the action compresses instead);
- any other ``4xx``: not retryable, with the provider's message.

The API key never appears in a message: every text taken from the provider is masked.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from phasegraph.errors import ActionError

__all__ = ["ChatRequest", "Completion", "Endpoint", "ProviderError", "complete"]

_MASK: Final = "***"
_CONTEXT_CODES: Final = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_WORDS: Final = ("maximum context length", "context length", "context window")


class ProviderError(ActionError):
    """The model provider refused or failed a request.

    Attributes:
        status: The HTTP status, when the provider answered.
        retryable: Whether trying again later may help (429, 5xx, timeouts).
        retry_after: Seconds the provider asked to wait, when it said.
        context_length: The request was over the model's context window.
    """

    failure_code = "llm_failure"
    """How the ``error`` trigger classifies it (other action errors are ``action_failed``)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
        context_length: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.context_length = context_length


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
    tens of milliseconds; a context is safe to share, and a call still opens (and closes)
    a client of its own.
    """
    return ssl.create_default_context()


def _arguments(request: ChatRequest) -> dict[str, Any]:
    arguments: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
    if request.tools:
        arguments["tools"] = list(request.tools)
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    if request.max_tokens is not None:
        arguments["max_tokens"] = request.max_tokens
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
    try:
        async with openai.AsyncOpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or "unset",
            timeout=request.timeout,
            max_retries=request.retries,
            http_client=openai.DefaultAsyncHttpxClient(verify=_tls()),
        ) as client:
            # Posted as it is: `chat.completions.create` first walks the whole body through
            # its type-driven transform, which for plain JSON messages changes nothing and
            # costs about 2 ms per message on a loaded machine (0.2 s a call at 80 messages,
            # growing with the conversation), against under 1 ms to encode it all.
            answer = await client.post(
                "/chat/completions",
                body=_arguments(request),
                cast_to=ChatCompletion,
                stream=request.stream,
                stream_cls=openai.AsyncStream[ChatCompletionChunk],
            )
            if request.stream:
                return await _collect(answer, request.model, on_delta)
            return _completion(answer)
    except openai.APIError as exc:
        raise _provider_error(exc, endpoint, request.model) from None


def _completion(answer: Any) -> Completion:
    if not answer.choices:
        raise ProviderError("the provider answered with no choices", retryable=True)
    choice = answer.choices[0]
    message = choice.message.model_dump(exclude_none=True)
    message = {k: message[k] for k in ("role", "content", "tool_calls") if k in message}
    message.setdefault("content", None)
    message["role"] = "assistant"
    return Completion(
        message=message,
        finish_reason=str(choice.finish_reason or "stop"),
        usage=_usage(answer.usage),
        model=str(answer.model or ""),
        id=str(answer.id or ""),
    )


def _usage(usage: Any) -> dict[str, int]:
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    prompt, completion = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
    total = int(usage.total_tokens or prompt + completion)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


@dataclass(slots=True)
class _Assembly:
    """A streamed answer being put back together."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str = "stop"
    usage: Any = None
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
        return Completion(
            message=message,
            finish_reason=self.finish_reason,
            usage=_usage(self.usage),
            model=self.model,
            id=self.id,
        )


async def _collect(stream: Any, model: str, on_delta: Callable[[str], None] | None) -> Completion:
    assembly = _Assembly(model=model)
    async for chunk in stream:
        assembly.id = chunk.id or assembly.id
        assembly.model = chunk.model or assembly.model
        if chunk.usage is not None:
            assembly.usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                assembly.text.append(delta.content)
                if on_delta is not None:
                    on_delta(delta.content)
            for call in delta.tool_calls or ():
                assembly.add_call(call)
            if choice.finish_reason:
                assembly.finish_reason = str(choice.finish_reason)
    return assembly.completion()


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
