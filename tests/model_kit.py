"""Agent graphs against the scripted model server: build, run, read back."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from phasegraph.api import Engine
from phasegraph.model import RunState, StepRecord
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store

ENDPOINT_VARIABLES = (
    "PHASEGRAPH_LLM_BASE_URL",
    "PHASEGRAPH_LLM_API_KEY",
    "PHASEGRAPH_LLM_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted tool call."""
    return {"name": name, "arguments": arguments}


def agent_node(
    llm: Mapping[str, Any] | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    machine: str = "agent",
    node_id: str = "agent",
    **extra: Any,
) -> dict[str, Any]:
    """A node of the agent machine: think is an llm action, act a tools action."""
    request = {"model": "main", "prompt": "{task}", "tools": ["read_file", "write_file"]}
    request.update(llm or {})
    bind = {"think": {"llm": request, **extra}, "act": {"tools": "conversation"}}
    return {"id": node_id, "machine": machine, "with": dict(settings or {}), "bind": bind}


def graph_text(*nodes: Mapping[str, Any], **top: Any) -> str:
    """A graph document (JSON is YAML)."""
    return json.dumps({"graph": "agent_graph", "nodes": list(nodes), **top})


async def run_agent(
    text: str,
    run_input: Mapping[str, Any] | None = None,
    store_url: str = "memory://",
    *,
    path: Path | None = None,
) -> tuple[RunState, list[StepRecord]]:
    """Run the graph to its end and return the state and the history."""
    definition = load_graph_text(text, name=str(path or "agent_graph.yaml"))
    async with open_store(store_url) as store:
        engine = Engine(store)
        state = await engine.run(definition, dict(run_input or {"task": "do it"}))
        return state, await engine.history(state.run_id)


def roles(conversation: Sequence[Mapping[str, Any]]) -> list[str]:
    """The role of each message."""
    return [str(message["role"]) for message in conversation]


def tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    """The decoded content of a tool message."""
    assert message["role"] == "tool"
    result: dict[str, Any] = json.loads(message["content"])
    return result
