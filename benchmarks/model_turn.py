"""CPU per model turn, in instructions: an agent on phasegraph against the bare openai loop.

Run from the repository root (needs valgrind)::

    .venv/bin/python benchmarks/model_turn.py [--base DIR] [--turns 5,25] [--middleware NAME]

The model is ``phasegraph model-server`` in a process of its own (its CPU is not
counted), answering by turn: a tool call at every turn, then an answer. Two clients
ask it the same conversations:

- ``phasegraph``: one node of the ``agent`` machine on the memory store, a turn being a
  committed ``llm:`` step (the model call) and a committed ``tools:`` step (one
  ``list_files`` call); ``--base DIR`` measures another checkout's ``engine/`` too;
- ``bare openai``: one ``openai.AsyncOpenAI`` client calling
  ``chat.completions.create`` in a loop with the same messages and tools, appending the
  answer and a stub tool result (the way the client is meant to be used: one client,
  kept).

Each runs under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0`` for a short and
a long run, and the difference of instructions over the difference of turns is a turn's
cost, so start-up, imports and the first connection cancel out. (That a run keeps one
connection is proven by ``tests/cli/test_model_connections.py``.) ``--middleware
loop_detection`` wraps the agent's actions in that middleware (each turn's tool call
then lists another folder, so that no call repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _callgrind import instructions, with_checkout

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("phasegraph")

_ENGINE = r"""
import asyncio, json, sys
from phasegraph import Engine, open_store
from phasegraph.spec import load_graph_text

async def main(turns, workspace, middleware):
    node = {{
        "id": "agent", "machine": "agent",
        "with": {{"workspace": workspace, "budgets": {{"turns": turns + 1}}}},
        "bind": {{
            "think": {{"llm": {{"model": "m", "prompt": "look", "tools": ["list_files"]}}}},
            "act": {{"tools": "conversation"}},
        }},
    }}
    graph = {{"graph": "agent_turns", "nodes": [node]}}
    if middleware:
        graph["middleware"] = [middleware]
    text = json.dumps(graph)
    definition = load_graph_text(text, name="agent_turns.yaml")
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(definition, {{}})
        if hasattr(engine, "aclose"):
            await engine.aclose()
    assert state.status == "completed", state.nodes["agent"].error

asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
"""

_BARE = r"""
import asyncio, json, sys
import openai

TOOLS = [{{"type": "function", "function": {{
    "name": "list_files", "description": "List a folder.",
    "parameters": {{"type": "object", "properties": {{"path": {{"type": "string"}}}}}},
}}}}]

async def main(turns, base_url):
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused") as client:
        messages = [{{"role": "user", "content": "look"}}]
        for _ in range(turns + 1):
            answer = await client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS
            )
            message = answer.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or ():
                result = json.dumps({{"entries": []}})
                messages.append({{"role": "tool", "tool_call_id": call.id, "content": result}})

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


class _ModelServer:
    """``phasegraph model-server`` answering by turn, in a subprocess."""

    def __init__(self, turns: int, folder: Path, distinct: bool) -> None:
        script = folder / "answers.json"
        calls = [
            {
                "tool_calls": [
                    {"name": "list_files", "arguments": {"path": f"d{i}" if distinct else "."}}
                ]
            }
            for i in range(turns)
        ]
        script.write_text(json.dumps([*calls, {"content": "done"}]))
        self.process = subprocess.Popen(
            [str(SCRIPT), "model-server", "--script", str(script), "--quiet"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def _instructions(code: str, args: list[str], root: Path | None, env: dict[str, str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(code)
        env = with_checkout(dict(env, PYTHONHASHSEED="0"), root, Path(tmp))
        return instructions([str(child), *args], env, Path(tmp))


def _per_turn(
    kind: str, turns: tuple[int, int], folder: Path, root: Path | None, middleware: str
) -> float:
    counts = []
    for count in turns:
        server = _ModelServer(count, folder, distinct=bool(middleware))
        try:
            env = dict(os.environ, PHASEGRAPH_LLM_BASE_URL=server.base_url)
            code = _BARE if kind == "bare" else _ENGINE
            last = [server.base_url] if kind == "bare" else [str(folder), middleware]
            counts.append(_instructions(code.format(), [str(count), *last], root, env))
        finally:
            server.close()
    return (counts[1] - counts[0]) / (turns[1] - turns[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout, measured as 'before'")
    parser.add_argument("--turns", default="5,25", help="the short and long run (default 5,25)")
    parser.add_argument("--middleware", default="", help="a built-in middleware around the agent")
    args = parser.parse_args()
    middleware = args.middleware
    low, high = (int(n) for n in args.turns.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bare = _per_turn("bare", (low, high), folder, None, middleware)
        rows = [("bare openai loop", bare)]
        if args.base is not None:
            before = _per_turn("engine", (low, high), folder, args.base, middleware)
            rows.append(("phasegraph before", before))
        rows.append(("phasegraph", _per_turn("engine", (low, high), folder, None, middleware)))
    around = f", middleware {middleware}" if middleware else ""
    print(
        f"instructions per model turn (difference of {high} and {low} turns), memory store{around}"
    )
    print("| client | Ir per turn | ÷ bare openai loop |")
    print("|---|---|---|")
    for name, value in rows:
        print(f"| {name} | {value:,.0f} | {value / bare:.2f} |")


if __name__ == "__main__":
    main()
