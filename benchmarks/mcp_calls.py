"""What a tool call from an MCP server costs beside a built-in one, in CPU time.

Run from the repository root (mcp-server-time installed beside this Python)::

    .venv/bin/python benchmarks/mcp_calls.py [--calls 300]

Both calls go through the same ``ToolFactory`` caller (phase rules, argument handling,
the scope): ``list_files`` of a folder of 20 files, and mcp-server-time's
``get_current_time`` for UTC over stdio in one session that stays open. The session is
started and warmed before counting. Printed: CPU microseconds per call of this process
(``time.process_time``), and for the MCP call also of the server process (its
``/proc/PID/stat`` user + system ticks). CPU time moves less with load than wall time,
but it moves: compare the two lines of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from phasegraph.spec import load_graph_text
from phasegraph.tools._registry import build_tools

GRAPH = """\
graph: bench
mcp:
  time: {command: [mcp-server-time], tools: [get_current_time]}
nodes:
  - id: work
    machine: task
    bind: {run: {python: "m:f", triggers: [ok]}}
"""


def _server_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


async def _per_call(
    call: Callable[[], Awaitable[Mapping[str, Any]]], calls: int
) -> tuple[float, Mapping[str, Any]]:
    result = await call()
    for _ in range(20):  # warm caches and the session
        await call()
    start = time.process_time()
    for _ in range(calls):
        result = await call()
    return (time.process_time() - start) / calls * 1e6, result


async def main(calls: int) -> None:
    """Print CPU µs per call of list_files and of the MCP get_current_time."""
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    definition = load_graph_text(GRAPH, name="bench.yaml")
    factory = build_tools(definition)
    caller = factory.bind(definition.nodes[0], "run", lambda kind, fields: None)
    with tempfile.TemporaryDirectory() as folder:
        for index in range(20):
            Path(folder, f"f{index}.txt").write_text("x")  # noqa: ASYNC240 (set-up, not measured)
        builtin, _ = await _per_call(lambda: caller("list_files", cwd=folder), calls)
    try:
        await caller("get_current_time", timezone="UTC")
        assert factory.servers is not None
        live = factory.servers.sessions("")["time"].live
        assert live is not None
        assert live.process is not None
        pid = live.process.pid
        ticks = _server_ticks(pid)
        mcp, result = await _per_call(lambda: caller("get_current_time", timezone="UTC"), calls)
        server = (_server_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / (calls + 20) * 1e6
        assert "structured" in result, result
    finally:
        await factory.close_run("")
    print(f"list_files (built-in)          : {builtin:8.0f} µs CPU per call")
    print(f"get_current_time (MCP, stdio)  : {mcp:8.0f} µs CPU per call in phasegraph")
    print(f"                                 {server:8.0f} µs CPU per call in the server")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
