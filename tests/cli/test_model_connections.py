"""``phasegraph run`` of an agent keeps one connection to its model for the whole run.

The scripted model server runs in the test's process and counts the connections its
requests come on; the run is the real command line, in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from builders import cli_argv
from phasegraph.testing import ScriptedModelServer

TURNS = 20


async def test_a_twenty_turn_agent_run_opens_one_connection(tmp_path: Path) -> None:
    script = [{"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}] * TURNS
    node = {
        "id": "agent",
        "machine": "agent",
        "with": {"workspace": str(tmp_path), "budgets": {"turns": TURNS + 1}},
        "bind": {
            "think": {"llm": {"model": "m", "prompt": "look", "tools": ["list_files"]}},
            "act": {"tools": "conversation"},
        },
    }
    graph = tmp_path / "agent.yaml"
    graph.write_text(json.dumps({"graph": "agent", "nodes": [node]}), encoding="utf-8")
    async with ScriptedModelServer([*script, {"content": "done"}]) as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PHASEGRAPH_"))},
            "PHASEGRAPH_LLM_BASE_URL": server.base_url,
        }
        process = await asyncio.create_subprocess_exec(
            *cli_argv("run", str(graph), "--store", "memory://", "--json"),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        assert json.loads(out)["status"] == "completed"
        assert server.request_count == TURNS + 1
        assert server.connections == 1
        for _ in range(6000):  # the process is gone: the server sees its connection end
            if server.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert server.open_connections == 0
