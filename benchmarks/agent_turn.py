"""Engine overhead per model turn: an agent loop against the scripted model, model time out.

One node of the ``agent`` machine makes TURNS tool-calling turns (think → act, two
committed steps each) and then answers. The model is the in-process scripted server,
reached by the real ``openai`` client over loopback. Every call of the client wrapper
(``phasegraph.actions.llm._client.complete``: client set-up, request, response) is timed
and subtracted from the run's wall time, and so is every tool call (``list_files`` of an
empty folder, run in a worker thread); what is left, divided by the turns, is the
engine's overhead per turn: building the request and the tool list, parsing the calls
and appending their results, merging the conversation, two commits.

    python benchmarks/agent_turn.py [--turns 200] [--repeat 5] [--store memory|sqlite]
        [--budget both]

Prints the median over the repeats for each store, interleaved round robin. With
``--budget both`` each store runs also under a run budget (``budget: {tokens: ...}``,
far from running out), whose every model call reserves its most in a committed step
first: the difference is what a reservation costs a turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import phasegraph.actions.llm._action as llm_action
import phasegraph.actions.llm._tools as tools_action
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store
from phasegraph.testing import ScriptedModelServer


def _script(turns: int) -> list[dict[str, Any]]:
    calls = [
        {
            "tool_calls": [
                {"name": "list_files", "arguments": {"path": ".", "recursive": n % 2 == 0}}
            ]
        }
        for n in range(turns)
    ]
    return [*calls, {"content": "done"}]


def _graph(workspace: str, turns: int, budget: bool = False) -> str:
    request = {"model": "m", "prompt": "go", "tools": ["list_files"], "max_tokens": 256}
    node = {
        "id": "agent",
        "machine": "agent",
        "with": {"workspace": workspace, "budgets": {"turns": turns + 1}},
        "bind": {"think": {"llm": request}, "act": {"tools": "conversation"}},
    }
    graph: dict[str, Any] = {"graph": "agent_bench", "nodes": [node]}
    if budget:
        graph["budget"] = {"tokens": 10**12}
    return json.dumps(graph)


def _timed(module: Any, name: str, spent: list[float]) -> Any:
    """Replace ``module.name`` by a wrapper adding its time to ``spent``; the original."""
    original = getattr(module, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    setattr(module, name, timed)
    return original


async def _once(
    store_url: str, turns: int, workspace: str, budget: bool = False
) -> tuple[float, float, float]:
    """(run wall seconds, seconds inside the model client, seconds inside tool calls)."""
    model, tools = [0.0], [0.0]
    complete = _timed(llm_action, "complete", model)
    dispatch = _timed(tools_action, "_dispatch", tools)
    try:
        async with ScriptedModelServer(_script(turns)) as server:
            os.environ["PHASEGRAPH_LLM_BASE_URL"] = server.base_url
            text = _graph(workspace, turns, budget)
            definition = load_graph_text(text, name="agent_bench.yaml")
            async with open_store(store_url) as store:
                engine = Engine(store)
                started = time.perf_counter()
                state = await engine.run(definition, {})
                wall = time.perf_counter() - started
            assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
    finally:
        llm_action.complete = complete
        tools_action._dispatch = dispatch
    return wall, model[0], tools[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite", "both"], default="both")
    parser.add_argument(
        "--budget",
        choices=["none", "both"],
        default="none",
        help="both: each store also under a run budget (a reservation per model call)",
    )
    args = parser.parse_args()
    stores = ["memory", "sqlite"] if args.store == "both" else [args.store]
    if args.budget == "both":
        stores += [f"{kind}+budget" for kind in stores]
    results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in stores}
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder) / "ws"
        workspace.mkdir()
        for round_ in range(args.repeat):
            for n, kind in enumerate(stores):
                url = (
                    "memory://"
                    if kind.startswith("memory")
                    else f"sqlite:///{folder}/r{round_}-{n}.db"
                )
                budget = kind.endswith("+budget")
                results[kind].append(asyncio.run(_once(url, args.turns, str(workspace), budget)))
    print(f"{args.turns} tool-calling turns + 1 answer, medians of {args.repeat} runs")
    print(
        "| store | wall ms/turn | model client ms/turn | tool calls ms/turn "
        "| engine µs/turn (model and tools excluded) |"
    )
    print("|---|---|---|---|---|")
    calls = args.turns + 1
    for kind, runs in results.items():
        wall = statistics.median(w for w, _, _ in runs) / calls
        model = statistics.median(m for _, m, _ in runs) / calls
        tools = statistics.median(t for _, _, t in runs) / args.turns
        engine = statistics.median((w - m - t) for w, m, t in runs) / calls
        print(
            f"| {kind} | {wall * 1e3:.2f} | {model * 1e3:.2f} | {tools * 1e3:.2f} "
            f"| {engine * 1e6:.0f} |"
        )


if __name__ == "__main__":
    main()
