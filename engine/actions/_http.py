"""``http:`` actions: send one request with aiohttp, map the response status to a trigger.

What is sent:

- ``url``, header values and ``body`` are templates over the run's input and data
  (``{name}``, ``{{`` for a literal brace); a template naming a missing value fails the
  step. Every value put into the URL is percent-encoded (``/``, ``?``, ``&`` included), so
  it stays inside its path segment or query value; the scheme and host are written in the
  graph.
- A string ``body`` is sent as is (``text/plain`` unless a ``Content-Type`` header says
  otherwise); any other body is sent as JSON.
- ``headers_from_env`` values are templates over environment variables, read at each call
  (``Authorization: "Bearer {API_TOKEN}"``). Those values are secrets: they go into the
  request only, and every occurrence of one is masked (``***``) in the result, the
  captured data and error messages, so no step record or event holds it.
- Redirects are not followed: a ``3xx`` status is mapped like any other.

What comes back:

- The status picks the trigger from ``on_status``: the exact code, else its class
  (``2xx``), else ``default``; a status none of those maps fails the action.
- With ``capture: KEY`` the response goes into run data under ``KEY``: the parsed body if
  the response says it is JSON (``application/json`` or ``...+json``), its text otherwise.
- The step record's output keeps ``method``, ``url`` (without credentials or query),
  ``status`` and the first :data:`BODY_CHARS` characters of the ``body``; the trigger's
  payload is ``{"status": CODE}``.

Failures: the whole exchange has one deadline, the action's ``timeout`` (default
:data:`DEFAULT_TIMEOUT` seconds). A request still unanswered then is abandoned with an
:class:`~phasegraph.errors.ActionTimeoutError`, which the ``error`` trigger classifies as
``timeout`` (retryable: a fallback chain retries it). A request that cannot be sent (no
connection, a malformed reply, a body over :data:`MAX_RESPONSE_BYTES`) raises one
:class:`~phasegraph.errors.ActionError` naming the method, the URL and the cause.

Each call opens its own ``aiohttp.ClientSession`` and closes it before it returns, so no
connection outlives its step: a run that stops, crashes or is cancelled leaves nothing
open, and a prepared graph needs no close hook. A run makes few requests; the lost
connection reuse does not matter beside that.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp

from phasegraph.actions._base import Action, ActionContext, ActionResult
from phasegraph.actions._human import render_payload
from phasegraph.actions._shell import render
from phasegraph.errors import ActionError, ActionTimeoutError
from phasegraph.model import ActionDef, frozen_map

__all__ = [
    "BODY_CHARS",
    "DEFAULT_TIMEOUT",
    "IDEMPOTENCY_HEADER",
    "MAX_RESPONSE_BYTES",
    "build_http_action",
]

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds an http action may take when its binding sets no ``timeout``."""
BODY_CHARS: Final = 2000
FAILURE_BODY_CHARS: Final = 300
"""How much of an error status's body its failure message quotes."""
"""How much of the response body the step record keeps."""
MAX_RESPONSE_BYTES: Final = 8 * 1024 * 1024
"""A larger response fails the action: run data is committed with every step."""

_MASK: Final = "***"
_DEFAULT_STATUS: Final = {"2xx": "ok", "default": "fail"}
_url_value = partial(quote, safe="")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    """One rendered request, and what must never be recorded from it."""

    method: str
    url: str
    headers: Mapping[str, str] = field(repr=False)  # may hold secrets
    body: Any
    secrets: tuple[str, ...] = field(repr=False)

    @property
    def shown_url(self) -> str:
        """The URL as records and messages show it: no credentials, query or fragment."""
        return _without_secrets(self.url)

    @property
    def shown(self) -> str:
        """``METHOD URL`` for messages."""
        return f"{self.method} {self.shown_url}"

    def mask(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, _MASK)
        return text


class _Environment(Mapping[str, str]):
    """Environment variables as a header template sees them; remembers what it handed out."""

    def __init__(self, header: str) -> None:
        self._header = header
        self.used: list[str] = []

    def __getitem__(self, name: str) -> str:
        value = os.environ.get(name)
        if value is None:
            raise ActionError(
                f"header {self._header!r} needs environment variable {name!r}, which is not set"
            )
        self.used.append(value)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


def _secret_headers(templates: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The ``headers_from_env`` headers, and the secret values put into them."""
    headers: dict[str, str] = {}
    used: list[str] = []
    for name, template in templates.items():
        environment = _Environment(name)
        headers[name] = render(template, environment)
        used += environment.used
    # Longest first, so a secret that contains another is masked whole.
    secrets = sorted({value for value in used if value}, key=len, reverse=True)
    return headers, tuple(secrets)


IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
"""The header that carries the step's effect id (``ctx.effect_id``) unless the binding sets it."""


def _without_secrets(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _url(template: str, values: Mapping[str, Any]) -> str:
    url = render(template, values, escape=_url_value)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ActionError(f"{_without_secrets(url)!r} is not an absolute http(s) URL with a host")
    return url


def _render_request(
    config: Mapping[str, Any], values: Mapping[str, Any], effect_id: str
) -> _Request:
    headers = {name: render(v, values) for name, v in (config.get("headers") or {}).items()}
    if not any(name.lower() == IDEMPOTENCY_HEADER.lower() for name in headers):
        # A receiver that deduplicates sees one effect per step, whatever the attempts.
        headers[IDEMPOTENCY_HEADER] = effect_id
    secret, secrets = _secret_headers(config.get("headers_from_env") or {})
    for name, value in {**headers, **secret}.items():
        if "\r" in value or "\n" in value:  # would end the header early: refuse, never split
            raise ActionError(f"header {name!r} has a line break in its value")
    body = config.get("body")
    return _Request(
        method=str(config.get("method", "GET")),
        url=_url(str(config["url"]), values),
        headers={**headers, **secret},
        body=render(body, values) if isinstance(body, str) else render_payload(body, values),
        secrets=secrets,
    )


def _body_argument(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if isinstance(body, str):
        return {"data": body}
    return {"json": body}


async def _read(response: aiohttp.ClientResponse, request: _Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise ActionError(
                f"{request.shown}: the response is larger than {MAX_RESPONSE_BYTES} bytes"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know: read it as UTF-8
        return body.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Response:
    status: int
    content_type: str
    text: str


async def _exchange(request: _Request) -> _Response:
    """Send ``request`` and read the whole response (the caller sets the deadline).

    Raises:
        ActionError: The request could not be sent or the response not read.
    """
    try:
        # The caller's deadline is the only one: aiohttp's own timeouts are all off.
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout()) as session,
            session.request(
                request.method,
                request.url,
                headers=dict(request.headers),
                allow_redirects=False,
                **_body_argument(request.body),
            ) as response,
        ):
            text = _decode(await _read(response, request), response.charset)
            return _Response(status=response.status, content_type=response.content_type, text=text)
    except (aiohttp.ClientError, ValueError) as exc:
        # ValueError: aiohttp refused a header or body before sending anything. An invalid
        # URL's text is the URL itself, query and all: name the problem instead.
        text = "invalid URL" if isinstance(exc, aiohttp.InvalidURL) else str(exc)
        cause = request.mask(text) or type(exc).__name__
        raise ActionError(f"{request.shown} failed: {cause}") from exc


def _trigger(on_status: Mapping[str, str], status: int, request: _Request) -> str:
    family = f"{status // 100}xx"
    for key in (str(status), family, "default"):
        if key in on_status:
            return on_status[key]
    raise ActionError(
        f"{request.shown} answered {status}, which on_status does not map (it maps "
        f"{', '.join(on_status)}): add {status}, {family} or default"
    )


def _masked(value: Any, request: _Request) -> Any:
    if isinstance(value, str):
        return request.mask(value)
    if isinstance(value, Mapping):
        return {request.mask(str(k)): _masked(v, request) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, request) for v in value]
    return value


def _captured(response: _Response, request: _Request) -> Any:
    kind = response.content_type
    if kind != "application/json" and not kind.endswith("+json"):
        return request.mask(response.text)
    if not response.text.strip():
        return None
    try:
        return _masked(json.loads(response.text), request)
    except ValueError as exc:
        raise ActionError(
            f"{request.shown} answered {kind}, but the body is not JSON: {exc}"
        ) from None


def build_http_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Return the action that sends the configured request (``base_dir`` is unused).

    Args:
        definition: An ``http:`` binding (``http``, ``on_status``, ``capture``, ``timeout``).
        base_dir: Unused: nothing of an http action is found beside the graph file.
    """
    config = definition.config
    on_status = {str(k): str(v) for k, v in (config.get("on_status") or _DEFAULT_STATUS).items()}
    timeout = float(config.get("timeout") or DEFAULT_TIMEOUT)
    capture = config.get("capture")

    async def call(ctx: ActionContext) -> ActionResult:
        request = _render_request(config["http"], ctx.values(), ctx.effect_id)
        try:
            async with asyncio.timeout(timeout):
                response = await _exchange(request)
        except TimeoutError as exc:
            message = (
                f"action of node {ctx.node_id!r} ran past its timeout of {timeout:g} s: "
                f"{request.shown} sent no complete response"
            )
            raise ActionTimeoutError(message, run_id=ctx.run_id, node_id=ctx.node_id) from exc
        trigger = _trigger(on_status, response.status, request)
        data = {str(capture): _captured(response, request)} if capture else {}
        # Mask before cutting: a cut could leave part of a secret unmasked.
        body = request.mask(response.text)[:BODY_CHARS]
        output = {
            "method": request.method,
            "url": request.shown_url,
            "status": response.status,
            "body": body,
        }
        return ActionResult(
            trigger=trigger,
            data=frozen_map(data),
            payload=frozen_map(_payload(request, response.status, body)),
            output=frozen_map(output),
        )

    return call


def _payload(request: _Request, status: int, body: str) -> dict[str, Any]:
    """The status; for an error status also what a fallback chain needs to say why."""
    if status < 400:
        return {"status": status}
    excerpt = " ".join(body.split())[:FAILURE_BODY_CHARS]
    said = f": {excerpt}" if excerpt else " with an empty body"
    message = f"{request.shown} answered {status}{said}"
    return {"status": status, "error_code": "action_failed", "action": "http", "message": message}
