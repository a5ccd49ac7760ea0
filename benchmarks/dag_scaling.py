"""How preparing and running a DAG scales with its size.

Run from the repository root::

    .venv/bin/python benchmarks/dag_scaling.py [--sizes 10,100,1000,5000,20000] [--repeat 3]

For each N, a graph of N no-op nodes is written as YAML, in one of two shapes:

- ``fanout``: a root, N - 2 workers that need it (a team fanning out over N - 2 files)
  and a join that needs every worker;
- ``layered``: rows of 10, each node needing two nodes of the row before (every node
  has about N / 2 transitive ancestors: what made preparing quadratic);
- ``full``: rows of 10, each node needing the whole row before (ten needs a node).

Measured,
sizes interleaved round-robin, medians of ``--repeat`` rounds, each in a fresh child
process so one size's garbage never lands on another's clock:

- prepare: CPU seconds to load the YAML, check it and compile it (``Engine.prepare``),
  after a first prepare of a 3-node graph (so imports made on first use are not counted);
- prepare µs/node, and its ratio against the smallest size's, in the same round;
- full GCs: the garbage collector's full (generation 2) collections while preparing,
  counted with ``gc.callbacks``: load does not move it, and each one walks every object
  alive, so it is what makes a big graph cost more per node than a small one;
- peak MB: the child's peak resident memory after preparing;
- µs/node: CPU of the run on the memory store (every step committed), per node;
- ratio: µs/node against the smallest size's, in the same round.

With ``--base DIR`` (another checkout), the same rounds run that tree's ``engine/`` too,
interleaved, and its table follows.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


BIND = '{run: {python: "loop_actions:ok", triggers: [ok]}}'


def graph_yaml(size: int, shape: str = "fanout") -> str:
    """The graph of ``size`` nodes (at least 3) in ``shape``."""
    if shape == "layered":
        return _layered(size)
    if shape == "full":
        return _full_layers(size)
    lines = ["graph: fanout", "concurrency: 8", "nodes:"]
    bind = BIND
    workers = [f"w{index}" for index in range(size - 2)]
    lines.append(f"  - {{id: root, machine: task, bind: {bind}}}")
    lines += [f"  - {{id: {w}, machine: task, needs: [root], bind: {bind}}}" for w in workers]
    lines.append(f"  - {{id: join, machine: task, needs: [{', '.join(workers)}], bind: {bind}}}")
    return "\n".join(lines) + "\n"


def _layered(size: int) -> str:
    lines = ["graph: layered", "concurrency: 8", "nodes:"]
    for index in range(size):
        needs = f", needs: [n{index - 10}, n{index - 10 + (index + 1) % 10}]" if index >= 10 else ""
        lines.append(f"  - {{id: n{index}, machine: task{needs}, bind: {BIND}}}")
    return "\n".join(lines) + "\n"


def _full_layers(size: int) -> str:
    lines = ["graph: full", "concurrency: 8", "nodes:"]
    for index in range(size):
        first = index - index % 10 - 10
        needs = f", needs: [{', '.join(f'n{first + k}' for k in range(10))}]" if first >= 0 else ""
        lines.append(f"  - {{id: n{index}, machine: task{needs}, bind: {BIND}}}")
    return "\n".join(lines) + "\n"


def child(size: int, shape: str) -> dict[str, float]:
    """One measurement in this process (run as ``--child N``)."""
    import asyncio

    sys.path.insert(0, str(HERE))
    from phasegraph import Engine, open_store

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fanout_{size}.yaml"
        path.write_text(graph_yaml(size, shape), encoding="utf-8")
        warm = Path(folder) / "warm.yaml"
        warm.write_text(graph_yaml(3, shape), encoding="utf-8")

        async def measure() -> dict[str, float]:
            async with open_store("memory://") as store:
                engine = Engine(store)
                engine.prepare(warm)  # imports made on first use
                full = [0]

                def count(phase: str, info: dict[str, int]) -> None:
                    if phase == "start" and info["generation"] == 2:
                        full[0] += 1

                gc.callbacks.append(count)
                started = time.process_time()
                prepared = engine.prepare(path)
                prepare_s = time.process_time() - started
                gc.callbacks.remove(count)
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                started = time.process_time()
                state = await engine.run(prepared)
                run_s = time.process_time() - started
            if str(state.status) != "completed":
                raise SystemExit(f"the run of {size} nodes ended {state.status}")
            return {
                "prepare": prepare_s,
                "full_gcs": full[0],
                "peak_mb": peak,
                "us_node": run_s / size * 1e6,
            }

        return asyncio.run(measure())


def sample(size: int, shape: str, tree: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        if tree is not None:  # import that checkout's engine/ as phasegraph
            (Path(folder) / "phasegraph").symlink_to(tree.resolve() / "engine")
            env["PYTHONPATH"] = folder
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(size), "--shape", shape],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
    return json.loads(out.stdout)


def _table(label: str, sizes: list[int], rounds: list[dict[int, dict[str, float]]]) -> None:
    base = sizes[0]
    print(f"{label}, medians of {len(rounds)} rounds (CPU)")
    print(
        f"| N | prepare (s) | prepare µs/node | ratio to N={base} | full GCs | peak MB "
        f"| run µs/node | ratio to N={base} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        prepare = statistics.median(r[size]["prepare"] for r in rounds)
        prep_ratio = statistics.median(
            r[size]["prepare"] / size / (r[base]["prepare"] / base) for r in rounds
        )
        full = statistics.median(r[size]["full_gcs"] for r in rounds)
        peak = statistics.median(r[size]["peak_mb"] for r in rounds)
        per_node = statistics.median(r[size]["us_node"] for r in rounds)
        ratio = statistics.median(r[size]["us_node"] / r[base]["us_node"] for r in rounds)
        print(
            f"| {size} | {prepare:.3f} | {prepare / size * 1e6:.0f} | {prep_ratio:.2f} "
            f"| {full:g} | {peak:.0f} | {per_node:.0f} | {ratio:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", choices=["fanout", "layered", "full"], default="layered")
    parser.add_argument("--base", type=Path, help="another checkout, measured as 'before'")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.shape)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    trees = {"this tree": None} if args.base is None else {"this tree": None, "base": args.base}
    rounds: dict[str, list[dict[int, dict[str, float]]]] = {label: [] for label in trees}
    for _ in range(args.repeat):
        for label, tree in trees.items():
            rounds[label].append({size: sample(size, args.shape, tree) for size in sizes})
    for label in trees:
        _table(f"{label}: shape {args.shape}", sizes, rounds[label])


if __name__ == "__main__":
    main()
