"""What storing each run's definition costs: bytes, store calls, and instructions.

Run from the repository root (the instruction counts need ``valgrind``)::

    .venv/bin/python benchmarks/definition_cost.py [--before REF]

Three figures:

- **bytes**: the stored definition of each built-in graph (its graph file, every machine
  file, built-in ones included, and its response scripts), as kept in the store once per
  distinct content;
- **store calls** on creating runs, counted by a store that forwards to the memory store:
  the first run of a definition the store lacks reads once (``has_definition``) and writes
  it once (``put_definition``); a run of a definition the store has reads once per engine
  and writes nothing but its own first step;
- **instructions** (callgrind, ``PYTHONHASHSEED=0``, each in a fresh process on a SQLite
  store): ``run`` of a graph whose definition the store lacks, and of one it has; and
  ``resume`` of a waiting run, in this tree and in the checkout ``--before`` (default:
  the commit before definitions were stored), side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from _callgrind import instructions, with_checkout  # noqa: E402

BUILT_IN = ("hello", "coding_task", "team_plan", "research_agent", "git_agent")
WAITING = REPO / "tests" / "fixtures" / "definitions" / "approval.yaml"
BEFORE = "a236a31"  # main before definitions were stored


def stored_bytes() -> list[tuple[str, int, int]]:
    """(graph, files, bytes) of each built-in graph's stored definition."""
    from phasegraph.codec._stored_definition import decode_definition
    from phasegraph.run._definitions import gather
    from phasegraph.spec import load_graph

    rows = []
    for name in BUILT_IN:
        key, body = gather(load_graph(name))
        rows.append((name, len(decode_definition(body, key).files), len(body)))
    return rows


def store_calls() -> list[tuple[str, dict[str, int]]]:
    """Store calls by name while runs are created, in the three cases of the doc."""
    from phasegraph import Engine, open_store
    from phasegraph.store.base import ForwardingStore

    class Counting(ForwardingStore):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.calls: collections.Counter[str] = collections.Counter()

        async def has_definition(self, key: str) -> bool:
            self.calls["has_definition"] += 1
            return await super().has_definition(key)

        async def put_definition(self, key: str, body: bytes) -> None:
            self.calls["put_definition"] += 1
            await super().put_definition(key, body)

        async def commit(self, lease: Any, commit: Any) -> None:
            self.calls["commit"] += 1
            await super().commit(lease, commit)

    async def go() -> list[tuple[str, dict[str, int]]]:
        rows = []
        async with open_store("memory://") as inner:
            store = Counting(inner)
            engine = Engine(store)
            async with engine.start(WAITING):
                pass
            rows.append(("first run of a new definition", dict(store.calls)))
            store.calls.clear()
            async with engine.start(WAITING):
                pass
            rows.append(("next run, same engine", dict(store.calls)))
            store.calls.clear()
            async with Engine(store).start(WAITING):
                pass
            rows.append(("next run, a new engine (process)", dict(store.calls)))
        return rows

    return asyncio.run(go())


def child(kind: str, store: str) -> None:
    """What callgrind counts: one command's work, in this process."""
    from phasegraph.cli import main

    if kind == "run":
        code = main(["run", str(WAITING), "--store", store, "-q"])
    else:
        code = main(["resume", "w", "--store", store, "-q"])
    if code != 3:
        raise SystemExit(f"{kind} ended with exit {code}, not 3 (waiting)")


def counted(kind: str, root: Path | None, folder: Path, store: Path) -> int:
    env = with_checkout(os.environ, root, folder)
    env["PYTHONHASHSEED"] = "0"
    env["PHASEGRAPH_CACHE_DIR"] = str(folder / "cache")
    argv = [str(Path(__file__).resolve()), "--child", kind, f"sqlite:///{store}"]
    return instructions(argv, env, folder)


def waiting_run(root: Path | None, folder: Path, store: Path) -> None:
    """A run ``w`` waiting at its gate in ``store``, made by the checkout at ``root``."""
    env = with_checkout(os.environ, root, folder)
    env["PYTHONHASHSEED"] = "0"
    env["PHASEGRAPH_CACHE_DIR"] = str(folder / "cache")  # warms the cache the counts use
    code = (
        "import sys; from phasegraph.cli import main; "
        f"sys.exit(main(['run', {str(WAITING)!r}, '--run-id', 'w', '--store', "
        f"'sqlite:///{store}', '-q']))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    if done.returncode != 3:
        raise SystemExit("the waiting run was not made")


def before_checkout(ref: str, folder: Path) -> Path:
    root = folder / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-f", "--detach", str(root), ref],
                   check=True, capture_output=True)  # fmt: skip
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=BEFORE, help="the checkout to compare resume with")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    print("| built-in graph | files | stored bytes |")
    print("| --- | --- | --- |")
    for name, files, size in stored_bytes():
        print(f"| {name} | {files} | {size:,} |")
    print()
    print("| creating a run | has_definition | put_definition | commits |")
    print("| --- | --- | --- | --- |")
    for case, calls in store_calls():
        row = [calls.get(n, 0) for n in ("has_definition", "put_definition", "commit")]
        print(f"| {case} | {row[0]} | {row[1]} | {row[2]} |")
    print()
    if shutil.which("valgrind") is None:
        print("no valgrind: instructions not counted")
        return
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        waiting_run(None, folder, folder / "warm.db")  # the compiled-graph cache is warm
        first = counted("run", None, folder, folder / "new.db")  # stores the definition
        again = counted("run", None, folder, folder / "new.db")  # finds it stored
        waiting_run(None, folder, folder / "new-w.db")
        resumed = counted("resume", None, folder, folder / "new-w.db")
        root = before_checkout(args.before, folder)
        try:
            waiting_run(root, folder, folder / "old-warm.db")
            before = counted("run", root, folder, folder / "old.db")
            waiting_run(root, folder, folder / "old-w.db")
            resumed_before = counted("resume", root, folder, folder / "old-w.db")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(root)],
                           check=False, capture_output=True)  # fmt: skip
    rows = [
        ("run, definition not yet stored", before, first),
        ("run, definition stored", before, again),
        ("resume of a waiting run", resumed_before, resumed),
    ]
    print("instructions (callgrind, PYTHONHASHSEED=0), one command in a fresh process")
    print("| command | before | now | ratio |")
    print("| --- | --- | --- | --- |")
    for case, old, new in rows:
        print(f"| {case} | {old:,} | {new:,} | {new / old:.2f} |")


if __name__ == "__main__":
    main()
