"""CPU of ``phasegraph run hello`` in instructions, against ``python -c "import json"``.

Run from the repository root (needs valgrind)::

    .venv/bin/python benchmarks/run_startup.py [--base DIR]

Each command runs once under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``
(the instructions of the whole process, start-up included: start-up is what is
measured); the ``hello`` run is the second one of an unchanged graph, on the memory
store, with the compiled-graph cache in a folder of its own (warmed by a first run);
the shell action's own process is not counted. With ``--base``, ``DIR`` is another
checkout whose ``engine/`` is imported instead, measured the same way. Prints each
count and its ratio to the bare interpreter's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _callgrind import instructions, with_checkout

RUN = ["-c", "from phasegraph.cli import main; raise SystemExit(main())"]
HELLO = [*RUN, "run", "hello", "--store", "memory://"]


def _env(tmp: Path, root: Path | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0", PHASEGRAPH_CACHE_DIR=str(tmp / "cache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up run writes the .pyc files
    return with_checkout(env, root, tmp)


def _hello(root: Path | None) -> int:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        env = _env(tmp, root)
        subprocess.run([sys.executable, *HELLO], env=env, check=True, capture_output=True)
        return instructions(HELLO, env, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout, measured as 'before'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        floor = instructions(["-c", "import json"], dict(os.environ), Path(folder))
    rows = [('python -c "import json"', floor)]
    if args.base is not None:
        rows.append(("phasegraph run hello, before", _hello(args.base.resolve())))
    rows.append(("phasegraph run hello", _hello(None)))
    print("| command | instructions | ÷ import json |")
    print("|---|---|---|")
    for name, count in rows:
        print(f"| {name} | {count:,} | {count / floor:.2f} |")


if __name__ == "__main__":
    main()
