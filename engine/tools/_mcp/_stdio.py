"""The stdio transport to an MCP server: its process, and newline-delimited JSON-RPC.

The SDK's own ``stdio_client`` keeps its process to itself, so a caller cannot tell a
server that died from a connection that closed, nor say with what status it exited.
This transport owns the :class:`asyncio.subprocess.Process` and hands it out beside the
streams a :class:`mcp.ClientSession` reads and writes; the framing is the SDK's (its
message types and JSON-RPC adapter).

The server leads its own session (so stopping it reaches everything it spawned) and gets
SIGKILL when the driver that started it dies. Shutdown follows the MCP lifecycle: close
its stdin, wait, then SIGTERM and finally SIGKILL the whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Final

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from phasegraph._process import die_with_parent

__all__ = ["StdioServer", "exit_status", "stdio_server"]

_LINE_LIMIT: Final = 64 * 1024 * 1024
"""The longest message line read from a server (a large diff is one line)."""
_GRACE: Final = 2.0
"""Seconds a server gets to exit after its stdin closes, and again after SIGTERM."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A running server: its process and the streams a ClientSession speaks through."""

    process: asyncio.subprocess.Process
    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    write: MemoryObjectSendStream[SessionMessage]


@contextlib.asynccontextmanager
async def stdio_server(
    argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, stderr: IO[bytes]
) -> AsyncIterator[StdioServer]:
    """Start ``argv`` and speak MCP over its stdin and stdout until the block ends.

    Raises:
        OSError: The program cannot be started.
    """
    # Spawned from the event loop's thread: the parent-death signal fires with the driver.
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
        preexec_fn=die_with_parent(),
        limit=_LINE_LIMIT,
    )
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(_from_server, process, read_in)
            pumps.start_soon(_to_server, process, write_out)
            try:
                yield StdioServer(process, read_out, write_in)
            finally:
                pumps.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read_in, read_out, write_in, write_out):
                await stream.aclose()


async def _from_server(
    process: asyncio.subprocess.Process, sink: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    """Each line the server writes, as a message (or the parse error, for the session)."""
    assert process.stdout is not None
    async with sink:  # closing it tells the session the connection ended
        while line := await process.stdout.readline():
            if not line.strip():
                continue
            item: SessionMessage | Exception
            try:
                item = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
            except ValueError as exc:
                item = exc
            try:
                await sink.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return


async def _to_server(
    process: asyncio.subprocess.Process, source: MemoryObjectReceiveStream[SessionMessage]
) -> None:
    assert process.stdin is not None
    async with source:
        async for message in source:
            text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                process.stdin.write(text.encode() + b"\n")
                await process.stdin.drain()
            except (ConnectionError, RuntimeError):
                return  # the server is gone: its stdout ends too, which the session sees


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Close the server's stdin, then signal its group until it has exited."""
    if process.stdin is not None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.close()
    for sent in (None, signal.SIGTERM, signal.SIGKILL):
        if sent is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sent)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), _GRACE)
            return


def exit_status(process: asyncio.subprocess.Process) -> str | None:
    """How the process ended: ``exit status N`` or ``killed by SIGNAME``; None if it runs."""
    code = process.returncode
    if code is None:
        return None
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
