"""What the effect ledger costs per tool call: CPU and bytes committed.

An ``act`` step runs K calls of one in-process tool (so the tool itself costs nearly
nothing); a run is a ``plan`` node that writes the model's message and the ``act`` node.
The cost of one call is the difference between runs with 9 calls and with 1, divided by
8, so the run's own start-up and the step's commit cancel out:

* ``none``: a reading tool; each call commits its result (one ``effect`` step);
* ``once``: each call commits its intent first, then its result (two steps).

Bytes are what the store is handed (record and snapshot bytes per commit): they do not
depend on the machine's load. CPU is ``time.process_time`` over many runs, taken by
alternating the trees compared when ``--base DIR`` names a checkout of an earlier
phasegraph (one ``act`` commit per step there), so both see the same load.

    python benchmarks/ledger_bench.py --store memory --runs 200
    python benchmarks/ledger_bench.py --store sqlite --base /path/to/old/checkout

Prints one JSON line per (tree, store, kind).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from _callgrind import with_checkout

_KINDS = ("none", "once")


def _measure(store_kind: str, kind: str, runs: int) -> dict[str, Any]:
    """Run in this process: the per-call CPU (µs) and bytes of ``kind`` calls."""
    import dataclasses

    from phasegraph import Engine
    from phasegraph.actions import ActionContext, ActionResult
    from phasegraph.actions.llm._tools import build_tools_action
    from phasegraph.model import ActionDef, GraphDef, NodeDef, replace
    from phasegraph.run import prepare
    from phasegraph.spec import load_graph_text
    from phasegraph.store import Commit, ForwardingStore, Lease, open_store
    from phasegraph.tools._registry import build_tools

    try:
        from phasegraph.actions import declare_effect
    except ImportError:  # a tree from before the ledger: every tool is alike there

        def declare_effect(kind: Any) -> Any:
            return lambda function: function

    @declare_effect(kind)
    async def counted(scope: Any, *, x: int) -> Mapping[str, Any]:
        return {"x": x, "text": "ok"}

    class Counting(ForwardingStore):
        written = 0

        async def commit(self, lease: Lease, commit: Commit) -> None:
            Counting.written += len(commit.record) + len(commit.snapshot or b"")
            await super().commit(lease, commit)

    base: GraphDef = load_graph_text(
        json.dumps(
            {
                "nodes": [
                    {"id": "plan", "machine": "task", "bind": {"run": {"shell": "true"}}},
                    {
                        "id": "act",
                        "machine": "task",
                        "needs": ["plan"],
                        "bind": {"run": {"shell": "true"}},
                    },
                ]
            }
        ),
        name="ledger.yaml",
    )
    nodes = tuple(NodeDef(id=n.id, machine=n.machine, needs=n.needs) for n in base.nodes)
    definition = replace(base, nodes=nodes)

    def prepared(calls: int) -> Any:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "counted", "arguments": json.dumps({"x": i})},
                }
                for i in range(calls)
            ],
        }

        async def plan(ctx: ActionContext) -> ActionResult:
            return ActionResult(trigger="ok", data={"conversation": [message]})

        act = build_tools_action(
            ActionDef(
                kind="tools",
                config={"tools": "conversation", "on_outcome": {"observed": "ok"}},
            ),
            None,
        )
        built = prepare(definition, "ledger.yaml", {("plan", "run"): plan, ("act", "run"): act})
        return dataclasses.replace(built, tools=build_tools(definition, {"counted": counted}))

    async def cost(calls: int, folder: str) -> tuple[float, int]:
        url = "memory://" if store_kind == "memory" else f"sqlite:///{folder}/runs-{calls}.db"
        graph = prepared(calls)
        async with open_store(url) as inner:
            store = Counting(inner)
            engine = Engine(store)
            await engine.run(graph)  # warm: imports, caches
            Counting.written = 0
            started = time.process_time()
            for _ in range(runs):
                await engine.run(graph)
            return time.process_time() - started, Counting.written

    with tempfile.TemporaryDirectory() as folder:
        one_cpu, one_bytes = asyncio.run(cost(1, folder))
        nine_cpu, nine_bytes = asyncio.run(cost(9, folder))
    return {
        "store": store_kind,
        "kind": kind,
        "runs": runs,
        "us_per_call": round((nine_cpu - one_cpu) / runs / 8 * 1e6, 1),
        "bytes_per_call": round((nine_bytes - one_bytes) / runs / 8, 1),
        "us_per_run_1_call": round(one_cpu / runs * 1e6, 1),
        "bytes_per_run_1_call": round(one_bytes / runs, 1),
    }


def _in_tree(tree: Path | None, store: str, kind: str, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        env = with_checkout(dict(os.environ, PYTHONHASHSEED="0"), tree, Path(folder))
        argv = [sys.executable, __file__, "--one", store, kind, str(runs)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    row: dict[str, Any] = json.loads(out)
    row["tree"] = "base" if tree is not None else "this"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--base", type=Path, help="a checkout of an earlier phasegraph")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        store, kind, runs = args.one
        print(json.dumps(_measure(store, kind, int(runs))))
        return
    trees = [None, args.base] if args.base else [None]
    for kind in _KINDS:
        for tree in trees:
            print(json.dumps(_in_tree(tree, args.store, kind, args.runs)), flush=True)


if __name__ == "__main__":
    main()
