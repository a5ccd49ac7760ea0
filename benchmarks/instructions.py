"""Instructions per committed step (or per read), counted by callgrind: load cannot move it.

Run from the repository root (needs valgrind; ``redis`` needs a Redis)::

    .venv/bin/python benchmarks/instructions.py [--cases memory,sqlite,redis,history]
        [--base DIR] [--redis redis://127.0.0.1:6379/0]

Each case runs twice under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``: once
for a short loop and once for a long one, and reports ``(Ir(long) - Ir(short)) / (long -
short)`` steps, so start-up, imports and preparation cancel out (each tree's child runs
once uncounted first, so bytecode compiled after an edit lands on neither count).
``history`` counts one ``Engine.history`` of a 2,000-step SQLite run the same way (reads
of 1 and 6); ``many``,
one run of 5 steps among 200 or 1,000 driven at once on the memory store (the garbage
collector's share grows with the objects alive, so this is where it shows). With
``--base``, ``DIR`` is another checkout whose ``engine/`` is imported instead, and the
ratio after ÷ before is printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _callgrind import instructions, with_checkout

HERE = Path(__file__).resolve().parent
SHORT, LONG = 300, 1300
READS = (1, 6)
MANY = (200, 1000)
CASES = ("memory", "sqlite", "redis", "history", "many")

_CHILD = r"""
import asyncio, sys, tempfile, uuid
sys.path.insert(0, {bench!r})
from phasegraph import Engine, open_store

async def main(case, count, redis):
    with tempfile.TemporaryDirectory() as tmp:
        url = {{"memory": "memory://", "many": "memory://", "redis": redis}}.get(
            case, f"sqlite:///{{tmp}}/r.db"
        )
        if case == "redis":
            url += ("&" if "?" in url else "?") + "prefix=ins" + uuid.uuid4().hex[:8]
        async with open_store(url) as store:
            engine = Engine(store)
            prepared = engine.prepare({loop!r})
            if case == "history":
                run_id = (await engine.run(prepared, {{"steps": 2000}})).run_id
                for _ in range(count):
                    await engine.history(run_id)
            elif case == "many":
                runs = (engine.run(prepared, {{"steps": 4}}) for _ in range(count))
                await asyncio.gather(*runs)
            else:
                await engine.run(prepared, {{"steps": count}})

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


def _instructions(
    root: Path | None, case: str, count: int, redis: str, *, warm: bool = False
) -> int:
    """Instructions of the child for ``count``; ``warm``: run it once first, uncounted.

    The warm-up writes what a first run writes (the bytecode of modules edited since the
    last run, the compiled-graph cache), which would otherwise land on one count only.
    """
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(_CHILD.format(bench=str(HERE), loop=str(HERE / "loop.yaml")))
        env = with_checkout(dict(os.environ, PYTHONHASHSEED="0"), root, Path(tmp))
        argv = [str(script), case, str(count), redis]
        if warm:
            subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True)
        return instructions(argv, env, Path(tmp))


def _per_unit(root: Path | None, case: str, redis: str) -> float:
    low, high = {"history": READS, "many": MANY}.get(case, (SHORT, LONG))
    few = _instructions(root, case, low, redis, warm=True)
    many = _instructions(root, case, high, redis)
    return (many - few) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="memory,sqlite")
    parser.add_argument("--base", type=Path, help="another checkout, measured as 'before'")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    cases = [case for case in args.cases.split(",") if case]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    for case in cases:
        unit = {"history": "read", "many": "run of 5 steps"}.get(case, "step")
        after = _per_unit(None, case, args.redis)
        line = f"{case:8} {after:12,.0f} Ir per {unit}"
        if args.base is not None:
            before = _per_unit(args.base, case, args.redis)
            line += f"   before {before:12,.0f}   after/before {after / before:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
