"""Sessions with a graph's MCP servers: one per run and server, started on first use.

A :class:`Connection` is one started server: a task of its own enters the transport and
the SDK's :class:`~mcp.ClientSession` (whose task groups must be left by the task that
entered them) and holds them until it is told to close, so any action task may call
through it and the run's driver may close it. A :class:`Session` is a server for one
run: it renders the settings from the run's values, connects on first use, and connects
again on the next call after the server died. :class:`McpServers` holds a graph's
servers and every run's sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import IO, Any, Final, cast

import httpx2
import mcp_types
from mcp import ClientSession
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from phasegraph.actions._http import IDEMPOTENCY_HEADER
from phasegraph.errors import ActionError
from phasegraph.model import Effect
from phasegraph.tools._builtins import error_result
from phasegraph.tools._mcp._config import EFFECT_META, McpServer
from phasegraph.tools._mcp._stdio import exit_status, stdio_server
from phasegraph.tools._schemas import function_entry

__all__ = ["Connection", "McpServers", "Session", "call_result"]

_STDERR_TAIL: Final = 1000
"""Characters of a server's stderr quoted when it fails to start or dies."""
_REAP_WAIT: Final = 10.0
"""Seconds to wait for a server whose output ended to be reaped, for its exit status."""


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups the SDK's task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _effect_header(request: httpx2.Request) -> None:
    """Send a tool call's effect id as its ``Idempotency-Key`` (an httpx request hook)."""
    if request.method != "POST" or not request.content.startswith(b"{"):
        return
    params = json.loads(request.content).get("params")
    effect = ((params or {}).get("_meta") or {}).get(EFFECT_META)
    if isinstance(effect, str) and effect:
        request.headers[IDEMPOTENCY_HEADER] = effect


def _effect_meta(effect_id: str) -> mcp_types.RequestParamsMeta | None:
    """The ``_meta`` of a tool call: its effect id, for a server that deduplicates."""
    if not effect_id:
        return None
    # An open map (extra_items=Any), which mypy does not read yet: extra keys are sent as is.
    return cast(mcp_types.RequestParamsMeta, {EFFECT_META: effect_id})


class Connection:
    """One started server and the session speaking to it, held by a task of its own."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.session: ClientSession | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.listing: dict[str, mcp_types.Tool] = {}
        # Where a stdio server's stderr goes, quoted when it fails; closed in close().
        self._stderr: IO[bytes] | None = (
            tempfile.TemporaryFile() if server.command is not None else None  # noqa: SIM115
        )
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        """Whether calls can still reach the server."""
        running = self._task is not None and not self._task.done()
        return running and (self.process is None or self.process.returncode is None)

    async def open(self) -> None:
        """Start the server, open the session and list its tools.

        Raises:
            ActionError: The server could not start, answer or list the graph's tools in
                ``start_timeout`` (naming the server and the tail of its stderr).
        """
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{self.server.name}")
        failed: BaseException | None = None
        problem = None
        try:
            async with asyncio.timeout(self.server.start_timeout):
                await asyncio.shield(self._ready)
        except TimeoutError:
            problem = f"did not answer within {self.server.start_timeout:g} s"
        except Exception as exc:
            failed = _leaf(exc)
        missing = [tool for tool in self.server.tools if tool not in self.listing]
        if failed is None and problem is None and missing:
            offered = ", ".join(sorted(self.listing)) or "none"
            problem = f"has no tool {', '.join(map(repr, missing))} (it offers: {offered})"
        if failed is None and problem is None:
            return
        await self._stop()  # first, so its exit status and all of its stderr are known
        error = self._failure(self._reason(failed) if failed is not None else str(problem))
        await self.close()
        raise error

    def _reason(self, exc: BaseException) -> str:
        status = None if self.process is None else exit_status(self.process)
        if status is not None:
            return f"exited ({status}) before it answered"
        if isinstance(exc, OSError):
            return f"could not be started: {exc}"
        return f"failed: {type(exc).__name__}: {exc}"

    def _failure(self, what: str) -> ActionError:
        tail = self.stderr_tail()
        return ActionError(
            f"MCP server {self.server.name!r} {what}"
            + (f"; its stderr ends: {tail}" if tail else "")
        )

    def stderr_tail(self) -> str:
        """The last lines the server wrote to its stderr (a stdio server)."""
        if self._stderr is None or self._stderr.closed:
            return ""
        size = self._stderr.seek(0, 2)
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        return self._stderr.read().decode("utf-8", "replace").strip()

    async def _hold(self) -> None:
        try:
            async with self._streams() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                cursor: str | None = None
                while True:  # the listing may come in pages
                    params = (
                        None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
                    )
                    page = await session.list_tools(params=params)
                    self.listing.update((tool.name, tool) for tool in page.tools)
                    if not (cursor := page.next_cursor):
                        break
                self.session = session
                self._ready.set_result(None)
                await self._closing.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)

    @contextlib.asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self.server
        if server.command is not None:
            assert self._stderr is not None  # opened for every stdio server
            env = {**get_default_environment(), **server.env}
            async with stdio_server(server.command, env, server.cwd, self._stderr) as started:
                self.process = started.process
                yield started.read, started.write
            return
        assert server.url is not None
        client = create_mcp_http_client(headers=dict(server.headers))
        client.event_hooks["request"].append(_effect_header)
        async with client, streamable_http_client(server.url, http_client=client) as streams:
            yield streams

    async def ended(self) -> str:
        """How the server ended (waiting a moment for a dying process to be reaped)."""
        if self.process is None:
            return "the connection closed"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.process.wait()), _REAP_WAIT)
        return exit_status(self.process) or "its output closed"

    async def _stop(self) -> None:
        self._closing.set()
        if self._task is not None:
            await asyncio.shield(asyncio.gather(self._task, return_exceptions=True))

    async def close(self) -> None:
        """Close the session and stop the server (idempotent)."""
        await self._stop()
        if self._stderr is not None:
            self._stderr.close()


def call_result(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """A tool's result as a mapping: its text blocks joined; an error as ``tool_error``."""
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    text = "\n".join(texts)
    if result.is_error:
        return dict(error_result("tool_error", text or "the tool reported an error"))
    found: dict[str, Any] = {"text": text}
    if result.structured_content is not None:
        found["structured"] = result.structured_content
    others = sorted({block.type for block in result.content} - {"text"})
    if others:
        found["omitted"] = others  # images, audio, resources: not passed on as text
    return found


class Session:
    """One server for one run: connected on first use, and again after the server died."""

    def __init__(
        self, server: McpServer, values: Mapping[str, Any], listed: dict[str, mcp_types.Tool]
    ) -> None:
        self._settings = server
        self._values = values
        self._listed = listed
        self._live: Connection | None = None
        self._lock = asyncio.Lock()
        self.in_flight = 0
        """Calls sent and not yet answered."""

    @property
    def live(self) -> Connection | None:
        """The connection calls go through now, if one is open."""
        return self._live

    async def connection(self) -> Connection:
        """The live connection, started now if there is none or its server has died."""
        async with self._lock:
            if self._live is not None and self._live.alive:
                return self._live
            if self._live is not None:
                await self._live.close()
                self._live = None
            try:
                settings = self._settings.rendered(self._values)
            except ActionError as exc:
                raise ActionError(f"MCP server {self._settings.name!r}: {exc.message}") from None
            started = Connection(settings)
            await started.open()
            self._listed.update(started.listing)
            self._live = started
            return started

    async def call(self, tool: str, arguments: Mapping[str, Any], effect_id: str) -> dict[str, Any]:
        """Call ``tool``; failures of the call, the tool or the server become error results."""
        live = await self.connection()
        assert live.session is not None
        name, timeout = self._settings.name, self._settings.timeout
        self.in_flight += 1
        try:
            result = await live.session.call_tool(
                tool,
                dict(arguments),
                read_timeout_seconds=timeout,
                meta=_effect_meta(effect_id),
            )
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                text = f"MCP server {name!r} did not answer {tool!r} within {timeout:g} s"
                return dict(error_result("timeout", text))
            if exc.code != mcp_types.CONNECTION_CLOSED:
                return dict(error_result("tool_error", f"{tool}: {exc.error.message}"))
            return await self._died(live, tool)
        finally:
            self.in_flight -= 1
        return call_result(result)

    async def _died(self, live: Connection, tool: str) -> dict[str, Any]:
        status = await live.ended()
        tail = live.stderr_tail()
        async with self._lock:
            if self._live is live:
                self._live = None
        await live.close()
        text = (
            f"MCP server {self._settings.name!r} ended ({status}) during the call to {tool!r}; "
            "the next call starts it again" + (f"; its stderr ends: {tail}" if tail else "")
        )
        return dict(error_result("server_exited", text))

    async def close(self) -> None:
        """Close the connection, if any."""
        async with self._lock:
            live, self._live = self._live, None
        if live is not None:
            await live.close()


class McpServers:
    """A graph's MCP servers, and the sessions every run has opened with them."""

    def __init__(self, servers: Mapping[str, McpServer]) -> None:
        self._servers = dict(servers)
        self._owner = {tool: s for s in servers.values() for tool in s.tools}
        # Tool → its latest listing (description, schema, hints), from any run's session.
        self._listed: dict[str, mcp_types.Tool] = {}
        self._sessions: dict[str, dict[str, Session]] = {}

    @property
    def tools(self) -> tuple[str, ...]:
        """Every tool the graph takes from its servers."""
        return tuple(self._owner)

    def __contains__(self, tool: object) -> bool:
        return tool in self._owner

    def _session(self, run_id: str, values: Mapping[str, Any], tool: str) -> Session:
        server = self._owner[tool]
        sessions = self._sessions.setdefault(run_id, {})
        found = sessions.get(server.name)
        if found is None:
            found = sessions[server.name] = Session(server, values, self._listed)
        return found

    async def describe(self, run_id: str, values: Mapping[str, Any], tool: str) -> dict[str, Any]:
        """The chat-request entry of ``tool``, from its server's listing (starting it)."""
        listed = self._listed.get(tool)
        if listed is None:
            await self._session(run_id, values, tool).connection()
            listed = self._listed[tool]
        return function_entry(tool, listed.description or tool, listed.input_schema)

    async def call(
        self,
        run_id: str,
        values: Mapping[str, Any],
        tool: str,
        arguments: Mapping[str, Any],
        effect_id: str,
    ) -> dict[str, Any]:
        """Call ``tool`` in the run's session with its server."""
        return await self._session(run_id, values, tool).call(tool, arguments, effect_id)

    def effect(self, tool: str) -> Effect:
        """The declared kind, else the server's hints, else ``once`` (nothing is known)."""
        declared = self._owner[tool].effects.get(tool)
        if declared is not None:
            return declared
        listed = self._listed.get(tool)
        hints = None if listed is None else listed.annotations
        if hints is not None and hints.read_only_hint:
            return Effect.NONE
        if hints is not None and hints.idempotent_hint:
            return Effect.IDEMPOTENT
        return Effect.ONCE

    def sessions(self, run_id: str) -> Mapping[str, Session]:
        """Server name → the session run ``run_id`` has opened with it."""
        return MappingProxyType(self._sessions.get(run_id, {}))

    async def close_run(self, run_id: str) -> None:
        """Close every session of run ``run_id``."""
        sessions = self._sessions.pop(run_id, {})
        await asyncio.gather(*(session.close() for session in sessions.values()))
