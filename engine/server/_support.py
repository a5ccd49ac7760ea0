"""Shared pieces of the HTTP server: settings, app keys, request parsing and JSON views."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

from aiohttp import web

from phasegraph._vocabulary import STREAM_RETENTION
from phasegraph.api import Engine
from phasegraph.codec import _envelope, _json
from phasegraph.errors import CodecError, InputError, PhasegraphError, RequestError
from phasegraph.model import RunState
from phasegraph.run import RUN_ID_PATTERN, PreparedGraph
from phasegraph.run._gates import gate_answers
from phasegraph.run._spend import budget_view, spent
from phasegraph.server._exec import Executor
from phasegraph.server._feed import EventHub
from phasegraph.server._jwt import JwtSettings
from phasegraph.views import jsonable, run_view

__all__ = [
    "ENGINE",
    "EXECUTOR",
    "GRAPHS",
    "HUB",
    "MAX_SEQ",
    "SETTINGS",
    "ServerSettings",
    "check_fields",
    "encodable",
    "fail",
    "int_query",
    "json_body",
    "ok",
    "optional_mapping",
    "optional_string",
    "problem",
    "run_id_of",
    "run_json",
]

_RUN_ID: Final = RUN_ID_PATTERN  # the one run-id rule, shared with the CLI and the API
_MAX_JSON_DEPTH: Final = 64
MAX_SEQ: Final = 2**62
"""Above any seq a run can reach; bounds the seq-like numbers a request may carry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How the server is configured.

    Attributes:
        token: A bearer token that signs in as the administrator ``operator`` (``None``:
            none). With no token, token file nor JWT settings, a request needs no
            credential and acts as the administrator ``local`` (a loopback server).
        tokens_file: A token file (``phasegraph tokens``) of named, scoped tokens; re-read
            whenever it changes.
        jwt: How to accept JWTs from the team's identity provider (``None``: not at all).
        trust_proxy: Believe ``X-Forwarded-For`` and ``X-Forwarded-Proto`` (the server
            sits behind a reverse proxy that sets them).
        auth_failure_burst: Refused credentials a client address may send in a row
            before it is answered 429.
        auth_failure_refill: Seconds after which a client address regains one attempt.
        clock: Wall-clock seconds (token expiry, the failed sign-in throttle).
        host: The address or name the server is bound to; requests must name it (or
            ``localhost``, ``127.0.0.1`` or ``[::1]`` for a loopback bind) as their ``Host``.
        allowed_hosts: More ``Host`` values accepted (``name`` for any port, or
            ``name:port``), e.g. the name a reverse proxy forwards.
        allowed_origins: Origins (``scheme://host[:port]``) whose web pages may call the
            server; requests with any other ``Origin`` header are refused.
        allow_python_modules: Modules ``python:`` actions of uploaded graphs may import.
        allow_shell: Whether uploaded graphs may use ``shell:`` actions.
        max_concurrent_runs: Runs stepped at once; the others wait for a slot.
        max_body_bytes: Largest request body (larger: 413).
        max_graph_bytes: Largest uploaded graph.
        max_graph_depth: Deepest nesting of an uploaded graph's YAML.
        upload_dir: Where uploaded graphs are kept (runs refer to them by path).
        read_only: Only read runs: drive none (no recovery at start) and refuse every
            route that would start, answer, resume, cancel or fork one (403).
        poll_interval: Seconds between store reads for event streams of runs stepped
            by another process.
        keepalive_interval: Seconds of silence after which a stream sends a comment.
        stream_retention: The most live events of a run's turns in flight an event stream
            replays to a client that reconnects (older ones: a ``stream_gap`` event).
        adopt_interval: Seconds between attempts to take over a run another process
            holds (after a crash, its lease must expire first).
        queue: Hand runs to ``phasegraph worker`` processes through the store's work
            queue (a Redis store) instead of driving them in the server.
    """

    token: str | None = None
    tokens_file: Path | None = None
    jwt: JwtSettings | None = None
    trust_proxy: bool = False
    auth_failure_burst: int = 10
    auth_failure_refill: float = 6.0
    clock: Callable[[], float] = time.time
    host: str = "127.0.0.1"
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    allow_python_modules: frozenset[str] = frozenset()
    allow_shell: bool = False
    max_concurrent_runs: int = 64
    max_body_bytes: int = 1024 * 1024
    max_graph_bytes: int = 256 * 1024
    max_graph_depth: int = 32
    upload_dir: Path = field(default_factory=lambda: Path(".phasegraph") / "uploads")
    poll_interval: float = 1.0
    keepalive_interval: float = 15.0
    stream_retention: int = STREAM_RETENTION
    adopt_interval: float = 1.0
    queue: bool = False
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise InputError("the server token must not be empty")
        for name in (
            "max_concurrent_runs",
            "max_body_bytes",
            "auth_failure_burst",
            "max_graph_bytes",
            "max_graph_depth",
            "stream_retention",
        ):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in (
            "poll_interval",
            "keepalive_interval",
            "adopt_interval",
            "auth_failure_refill",
        ):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be positive, not {getattr(self, name)}")


ENGINE: Final = web.AppKey("phasegraph.engine", Engine)
SETTINGS: Final = web.AppKey("phasegraph.settings", ServerSettings)
EXECUTOR: Final = web.AppKey("phasegraph.executor", Executor)
HUB: Final = web.AppKey("phasegraph.hub", EventHub)
GRAPHS: Final = web.AppKey[dict[str, PreparedGraph]]("phasegraph.graphs")
"""Uploaded graphs by the SHA-256 of their text, so each text is parsed once (bounded)."""


def fail(where: str, what: str) -> NoReturn:
    """Raise a :class:`RequestError` for one field."""
    raise RequestError([(where, what)])


def _no_constants(name: str) -> NoReturn:
    fail("body", f"not valid JSON ({name} is not valid JSON)")


async def json_body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object (``{}`` when empty and not ``required``).

    Raises:
        RequestError: Not a JSON object.
        HTTPRequestEntityTooLarge: Larger than the server's body limit.
    """
    raw = await request.read()
    if not raw.strip():
        if required:
            fail("body", "a JSON object is required")
        return {}
    try:
        value = json.loads(raw, parse_constant=_no_constants, parse_int=_json.json_int)
    except RequestError:
        raise  # already names the field (a NaN or Infinity constant)
    except json.JSONDecodeError as exc:
        fail("body", f"not valid JSON ({exc})")
    except ValueError as exc:  # valid JSON, but a number too long to read
        fail("body", str(exc))
    except RecursionError as exc:
        fail("body", f"not valid JSON ({exc})")
    if not isinstance(value, dict):
        fail("body", f"expected a JSON object, not {type(value).__name__}")
    if _depth(value) > _MAX_JSON_DEPTH:
        fail("body", f"nested deeper than {_MAX_JSON_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """How deeply JSON ``value`` nests (iteratively: no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack += [(child, level + 1) for child in item.values()]
        elif isinstance(item, list):
            stack += [(child, level + 1) for child in item]
    return deepest


def check_fields(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """Refuse unknown keys, naming them and the known ones."""
    unknown = sorted(set(body) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise RequestError([(f"body.{key}", f"unknown field (known: {known})") for key in unknown])


def optional_string(
    body: Mapping[str, Any], key: str, pattern: re.Pattern[str] | None = None
) -> str | None:
    """``body[key]`` if present: a string, matching ``pattern`` when given."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        fail(f"body.{key}", "expected a non-empty string")
    if pattern is not None and not pattern.fullmatch(value):
        fail(f"body.{key}", f"must match {pattern.pattern}")
    return value


def optional_mapping(body: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``body[key]`` if present: a JSON object whose values phasegraph can store."""
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(f"body.{key}", f"expected a JSON object, not {type(value).__name__}")
    encodable(value, f"body.{key}")
    return value


def encodable(values: Mapping[str, Any], where: str) -> None:
    """Refuse values a snapshot cannot hold (integers beyond 64 bits, ...), as bad input."""
    try:
        _envelope.check_encodable(values)
    except CodecError as exc:
        fail(where, exc.message)


def run_id_of(body: Mapping[str, Any]) -> str | None:
    """The optional client-chosen ``run_id`` of a new run."""
    return optional_string(body, "run_id", _RUN_ID)


def int_query(
    request: web.Request, name: str, default: int | None, low: int, high: int
) -> int | None:
    """An integer query parameter within ``[low, high]``."""
    text = request.query.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", text) or not low <= int(text) <= high:
        fail(f"query.{name}", f"expected an integer from {low} to {high}, not {text!r:.40}")
    return int(text)


def ok(
    payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response."""
    text = json.dumps(jsonable(payload), sort_keys=True, default=str)
    return web.Response(text=text, status=status, content_type="application/json", headers=headers)


def problem(
    status: int, title: str, detail: str, *, code: str, extra: Mapping[str, Any] | None = None
) -> web.Response:
    """An RFC 9457 problem response."""
    body = {
        "type": f"urn:phasegraph:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **(extra or {}),
    }
    response = ok(body, status=status)
    response.content_type = "application/problem+json"
    return response


async def run_json(
    app: web.Application, state: RunState, *, driving: bool | None = None
) -> dict[str, Any]:
    """The run as the API shows it (:func:`~phasegraph.views.run_view`, as ``status --json``).

    Each pending interrupt lists the answers its gate accepts (read from the run's graph,
    which the engine keeps prepared); ``driving`` defaults to whether this server steps it.
    """
    prepared = None
    # The graph is read for its gates' answers and its budget's limits: a run with no
    # gate open whose nodes spent nothing on a model needs neither.
    if state.interrupts or any(spent(state).values()):
        try:
            prepared = await app[ENGINE].prepared_for(state)
        except PhasegraphError:
            prepared = None  # its definition cannot be loaded here: answers, limits unknown
    if driving is None:
        driving = app[EXECUTOR].driving(state.run_id)
    budget = budget_view(state, None if prepared is None else prepared.definition.budget)
    return run_view(state, driving=driving, answers=gate_answers(prepared, state), budget=budget)
