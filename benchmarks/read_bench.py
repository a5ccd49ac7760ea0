"""Reads as fast as writes: ``Engine.get`` of a run's head and ``phasegraph history --json``.

Run from the repository root::

    .venv/bin/python benchmarks/read_bench.py [--steps 10000] [--gets 200] [--cli 7]
        [--redis URL] [--base DIR] [--rounds 5] [--no-pyc]

The goals (issue "cost that grows linearly", item 5): ``Engine.get`` of a run of
``--steps`` tiny steps in at most 0.3 ms on every store, wherever its head is between two
snapshots; ``phasegraph history RUN --json`` of that run in at most 0.3 s.

Builds one run of ``loop.yaml`` per store (outside the clock), then prints:

* **get** — ``Engine.get(run_id, seq)`` for five seqs across one whole interval between
  two snapshots: at a snapshot (0 records applied), a quarter, half and three quarters of
  the way, and just before the next (the most records a read of this run applies). For
  each, the median of ``--gets`` calls in milliseconds, and beside it, interleaved call by
  call, the *record by record* read the fold replaced: the same store read, the snapshot
  decoded, then every record after it decoded into a ``StepRecord`` and applied with
  ``apply_records``.
* **history --json** (SQLite) — ``--cli`` runs of the console script in a subprocess,
  output to ``/dev/null``: the median wall and CPU time (user + system, ``getrusage``) in
  seconds, and the same for ``history RUN --json --to 0`` (no record: interpreter
  start-up, imports, the store opened and read), the part that is start-up
  (``benchmarks/cli_startup.py`` measures start-up alone). The children load modules
  from cached bytecode, as an installed phasegraph does: ``PYTHONDONTWRITEBYTECODE`` is
  dropped from their environment and one unmeasured run writes the ``.pyc`` files
  (``--no-pyc``: each version's package is copied without its ``__pycache__`` and
  ``PYTHONDONTWRITEBYTECODE`` set, so every run compiles phasegraph's modules, as in an
  environment that never writes bytecode; the standard library's stays cached).

``--base DIR`` also compares with an older checkout: ``DIR/phasegraph`` is (a link to)
its package directory, e.g. ``git archive <commit> | tar -x -C /tmp/base`` and ``ln -s
/tmp/base/engine /tmp/basepath/phasegraph``, then ``--base /tmp/basepath``. Each version
builds its own run (its own snapshot cadence) on SQLite and Redis, in a subprocess; then
its ``get`` at the five seqs of its own interval and its ``history --json`` run in
subprocesses alternating with this checkout's, ``--rounds`` rounds, and the medians of
the rounds are printed. Wall times on a loaded machine mostly measure the load: the load
average is printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from phasegraph import Engine, codec, open_store
from phasegraph.model import RunState, apply_records
from phasegraph.store import Store

HERE = Path(__file__).parent
GRAPH = HERE / "loop.yaml"
GET_GOAL_MS = 0.3
HISTORY_GOAL_S = 0.3
POSITIONS = ("at a snapshot", "1/4 on", "1/2 on", "3/4 on", "last before next")

Row = tuple[int, list[float]]  # records applied, medians in ms


async def _build(store: Store, steps: int) -> str:
    engine = Engine(store)
    state = await engine.run(engine.prepare(GRAPH), {"steps": steps})
    if str(state.status) != "completed":
        raise SystemExit(f"benchmark run did not complete: {state.status}")
    return state.run_id


async def _record_by_record(store: Store, run_id: str, seq: int) -> RunState:
    """The read ``Engine.get`` made before records were folded unbuilt."""
    stored = await store.read(run_id, seq)
    state = codec.decode_snapshot(stored.snapshot)
    return apply_records(state, [codec.decode_record(blob) for blob in stored.records])


async def _seqs(store: Store, run_id: str) -> list[int]:
    """Five seqs across the whole snapshot interval just before the head's."""
    head = await store.read(run_id)
    later = head.snapshot_seq
    earlier = (await store.read(run_id, later - 1)).snapshot_seq
    span = later - earlier  # seqs earlier .. later - 1 read from the earlier snapshot
    return [earlier + (span - 1) * quarter // 4 for quarter in range(5)]


async def _measure(
    url: str, run_id: str | None, steps: int, count: int, old_style: bool
) -> tuple[str, list[Row]]:
    """The run (built first when ``run_id`` is None) and, for each seq of :func:`_seqs`,
    the records a read applies and the median ms of ``Engine.get`` (and of the
    record-by-record read, interleaved)."""
    async with open_store(url) as store:
        run_id = run_id or await _build(store, steps)
        engine = Engine(store)
        rows = []
        for seq in await _seqs(store, run_id):
            applied = len((await store.read(run_id, seq)).records)
            assert await engine.get(run_id, seq) == await _record_by_record(store, run_id, seq)
            new: list[float] = []
            old: list[float] = []
            for _ in range(count):
                started = time.perf_counter()
                await engine.get(run_id, seq)
                new.append(time.perf_counter() - started)
                if old_style:
                    started = time.perf_counter()
                    await _record_by_record(store, run_id, seq)
                    old.append(time.perf_counter() - started)
            rows.append((applied, [statistics.median(s) * 1e3 for s in (new, old) if s]))
    return run_id, rows


def _env(base: str | None, pyc: bool) -> dict[str, str]:
    """The environment of a child process: the base's package first, if given.

    Without ``pyc``, the package (this checkout's or the base's) is a copy with no
    bytecode, and none is written: the child compiles phasegraph's modules.
    """
    env = dict(os.environ)
    if pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        base = _copy_without_bytecode(base)
    if base is not None:
        env["PYTHONPATH"] = base
    return env


_COPIES: dict[str | None, str] = {}


def _copy_without_bytecode(base: str | None) -> str:
    """A directory holding a ``phasegraph`` package copied from ``base`` (or this one)."""
    if base not in _COPIES:
        import phasegraph

        source = Path(base, "phasegraph") if base else Path(phasegraph.__file__).parent
        target = Path(tempfile.mkdtemp(prefix="readbench-nopyc-"))
        atexit.register(shutil.rmtree, target, ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source.resolve(), target / "phasegraph", ignore=ignore)
        _COPIES[base] = str(target)
    return _COPIES[base]


def _worker(argv: list[str], base: str | None) -> str:
    """Run this script as a worker (``--worker-build``/``--worker-gets``); its stdout."""
    return subprocess.run(
        [sys.executable, __file__, *argv],
        env=_env(base, pyc=True),
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _compare_gets(
    args: argparse.Namespace, urls: dict[str, str]
) -> tuple[dict[str, str], dict[str, list[Row]]]:
    """Each version's run (its id), then its ``get`` medians in alternating rounds."""
    versions = {"new": None, "base": args.base}
    runs = {
        name: _worker(["--steps", str(args.steps), "--worker-build", urls[name]], base).strip()
        for name, base in versions.items()
    }
    samples: dict[str, list[list[Row]]] = {name: [] for name in versions}
    for _ in range(args.rounds):
        for name, base in versions.items():
            argv = ["--gets", str(args.gets), "--worker-gets", urls[name], runs[name]]
            samples[name].append(json.loads(_worker(argv, base)))
    return runs, {
        name: [
            (rounds[0][at][0], [statistics.median(r[at][1][0] for r in rounds)])
            for at in range(len(POSITIONS))
        ]
        for name, rounds in samples.items()
    }


def _cli(args: argparse.Namespace, runs: dict[str, tuple[str, str]]) -> dict[str, list[float]]:
    """'version what' → median wall and CPU seconds of ``history --json`` in subprocesses."""
    script = str(Path(sys.executable).with_name("phasegraph"))
    versions = {"new": None, "base": args.base} if args.base else {"new": None}
    commands: dict[str, tuple[list[str], dict[str, str]]] = {}
    for name, base in versions.items():
        url, run_id = runs[name]
        env = _env(base, args.pyc)
        everything = [script, "history", run_id, "--json", "--store", url]
        commands[f"{name} all"] = (everything, env)
        commands[f"{name} none"] = ([*everything[:4], "--to", "0", *everything[4:]], env)
        subprocess.run(everything, stdout=subprocess.DEVNULL, check=True, env=env)  # warm-up
    samples: dict[str, tuple[list[float], list[float]]] = {key: ([], []) for key in commands}
    for _ in range(args.cli):
        for key, (argv, env) in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=env)
            samples[key][0].append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            samples[key][1].append(cpu)
    return {key: [statistics.median(w), statistics.median(c)] for key, (w, c) in samples.items()}


def _print_gets(title: str, columns: dict[str, list[Row]]) -> None:
    print(f"\n{title}: Engine.get, median ms; goal <= {GET_GOAL_MS} ms")
    names = list(columns)
    print(f"  {'head':<17}" + "".join(f" | {name:>26}" for name in names))
    for at, position in enumerate(POSITIONS):
        cells = ""
        for name in names:
            applied, values = columns[name][at]
            shown = " / ".join(f"{value:6.3f}" for value in values)
            cells += f" | {applied:3d} records {shown:>14}"
        print(f"  {position:<17}{cells}")
    worst = max(values[0] for _, values in columns[names[0]])
    print(
        f"  {names[0]}: worst {worst:.3f} ms, goal {'met' if worst <= GET_GOAL_MS else 'NOT met'}"
    )


def _print_cli(args: argparse.Namespace, cli: dict[str, list[float]]) -> None:
    pyc = "cached .pyc" if args.pyc else "no .pyc: phasegraph compiled every run"
    records = args.steps + 2
    print(f"\nsqlite: phasegraph history RUN --json, {args.cli} runs ({pyc}); goal <= 0.3 s")
    for key, (wall, cpu) in cli.items():
        name, what = key.split()
        shown = f"{records} records" if what == "all" else "--to 0 (start-up)"
        print(f"  {name:<5} {shown:<18} {wall:6.3f} s wall, {cpu:6.3f} s cpu")
    wall, startup = cli["new all"][0], cli["new none"][0]
    met = "met" if wall <= HISTORY_GOAL_S else "NOT met"
    print(f"  new: goal {met}: {wall:.3f} s, of which start-up {startup:.3f} s")


def _cleanup_redis(url: str, prefix: str) -> None:
    import redis  # here: only with --redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _with_prefix(url: str, prefix: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--gets", type=int, default=200, help="calls per measured seq")
    parser.add_argument("--cli", type=int, default=7, help="history --json runs per version")
    parser.add_argument("--rounds", type=int, default=5, help="--base get rounds")
    parser.add_argument("--redis", default=None, help="also measure this redis:// URL")
    parser.add_argument("--base", default=None, help="compare with the package under DIR")
    parser.add_argument("--no-pyc", dest="pyc", action="store_false", help="compile every run")
    parser.add_argument("--worker-build", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-gets", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_build:
        print(asyncio.run(_measure(args.worker_build, None, args.steps, 0, False))[0])
        return
    if args.worker_gets:
        url, run_id = args.worker_gets
        print(json.dumps(asyncio.run(_measure(url, run_id, 0, args.gets, False))[1]))
        return
    prefix = f"readbench{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"memory": "memory://", "sqlite": f"sqlite:///{tmp}/bench.db"}
        if args.redis:
            stores["redis"] = _with_prefix(args.redis, prefix)
        try:
            for name, url in stores.items():
                run_id, rows = asyncio.run(_measure(url, None, args.steps, args.gets, True))
                _print_gets(name, {"folded / record by record": rows})
                runs = {"new": (url, run_id)}
                if args.base and name != "memory":
                    urls = {v: f"sqlite:///{tmp}/{v}.db" for v in ("new", "base")}
                    if name == "redis":
                        urls = {v: _with_prefix(args.redis, f"{prefix}{v}") for v in urls}
                    built, columns = _compare_gets(args, urls)
                    _print_gets(f"{name}, this checkout vs --base, {args.rounds} rounds", columns)
                    runs = {v: (urls[v], built[v]) for v in urls}
                if name == "sqlite":
                    _print_cli(args, _cli(args, runs))
        finally:
            if args.redis:
                _cleanup_redis(args.redis, prefix)
    print(f"\n(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
