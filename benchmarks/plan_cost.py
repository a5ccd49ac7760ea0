"""What a phase of a plan made at run time costs, against a node of a graph written ahead.

Run from the repository root (needs ``valgrind``)::

    .venv/bin/python benchmarks/plan_cost.py [--sizes 100,200]

Two graphs of the same shape: phases in rows of ten, each needing two phases of the row
before (the ``layered`` shape of ``dag_scaling.py``), each phase a ``task`` node whose
action does nothing (``loop_actions:ok``):

- ``static``: the phases are the graph's nodes, written in its YAML;
- ``planned``: one node on the ``plan`` machine whose planner writes the same phases as a
  plan, which its ``plan:`` binding turns into children (one ``expand`` step), each made
  from a ``task`` template, then joins them.

Each is loaded, prepared and run to completion on the memory store in a fresh process
under callgrind (``PYTHONHASHSEED=0``), at two sizes; the difference of the two counts
divided by the difference of sizes is the cost of one more phase, start-up and the
planner's own steps cancelling out. The ratio planned / static is the price of making
the phases at run time rather than writing them down: loading, checking and compiling
a YAML node against validating an item, making its node from the template and compiling
the expanded graph, plus the same steps for both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _callgrind import instructions, with_checkout  # noqa: E402

BIND = '{run: {python: "loop_actions:ok", triggers: [ok]}}'


def _needs(index: int) -> list[int]:
    return [index - 10, index - 10 + (index + 1) % 10] if index >= 10 else []


def static_yaml(size: int) -> str:
    """The phases written as the graph's nodes."""
    lines = ["graph: static", "concurrency: 8", "nodes:"]
    for index in range(size):
        needs = _needs(index)
        shown = f", needs: [{', '.join(f'p{n}' for n in needs)}]" if needs else ""
        lines.append(f"  - {{id: p{index}, machine: task{shown}, bind: {BIND}}}")
    return "\n".join(lines) + "\n"


PLANNED = """graph: planned
concurrency: 8
nodes:
  - id: phases
    machine: plan
    writes: [plan]
    bind:
      plan: {{python: "plan_cost:plan", triggers: [planned]}}
      children:
        plan:
          from: plan
          id: id
          needs: needs
          max_items: {size}
          concurrency: 8
          template:
            machine: task
            bind: {bind}
"""


def planned_yaml(size: int) -> str:
    """A node whose plan (written by :func:`plan`) makes the phases."""
    return PLANNED.format(size=size, bind=BIND)


async def plan(ctx: object) -> object:
    """The planner: the phases of the static graph, as a plan of ``PLAN_SIZE`` items."""
    from phasegraph.actions import ActionResult

    size = int(os.environ["PLAN_SIZE"])
    items = [
        {"id": f"p{index}", "needs": [f"p{n}" for n in _needs(index)]} for index in range(size)
    ]
    return ActionResult(trigger="planned", data={"plan": items})


def child(kind: str, size: int) -> None:
    """Load, prepare and run one graph to its end (what callgrind counts)."""
    from phasegraph import Engine, open_store

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{kind}.yaml"
        text = static_yaml(size) if kind == "static" else planned_yaml(size)
        path.write_text(text, encoding="utf-8")

        async def go() -> str:
            async with open_store("memory://") as store:
                state = await Engine(store).run(path)
            return str(state.status)

        status = asyncio.run(go())
        if status != "completed":
            raise SystemExit(f"the {kind} run of {size} phases ended {status}")


def per_phase(kind: str, sizes: tuple[int, int], root: Path | None, folder: Path) -> float:
    env = with_checkout(os.environ, root, folder)
    env["PYTHONHASHSEED"] = "0"
    env["PHASEGRAPH_CACHE_DIR"] = str(folder / f"cache-{kind}")  # each run loads its YAML
    counts = []
    for size in sizes:
        env["PLAN_SIZE"] = str(size)
        argv = [str(Path(__file__).resolve()), "--child", kind, str(size)]
        counts.append(instructions(argv, env, folder))
    small, large = sizes
    return (counts[1] - counts[0]) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,200", help="two sizes, e.g. 100,200")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    small, large = (int(size) for size in args.sizes.split(","))
    print(f"instructions per phase (callgrind, PYTHONHASHSEED=0), sizes {small} and {large}")
    with tempfile.TemporaryDirectory() as folder:
        static = per_phase("static", (small, large), None, Path(folder))
        planned = per_phase("planned", (small, large), None, Path(folder))
    print("| graph | instructions per phase | ratio |")
    print("| --- | --- | --- |")
    print(f"| static: phases written as nodes | {static:,.0f} | 1.00 |")
    print(f"| planned: phases made from a plan | {planned:,.0f} | {planned / static:.2f} |")


if __name__ == "__main__":
    main()
