"""The codec before and after msgspec: µs per encode and decode, and ``Engine.history``.

Run from the repository root (Redis is optional)::

    .venv/bin/python benchmarks/codec_bench.py [--old fda2748] [--rounds 9]
        [--steps 10000] [--redis redis://127.0.0.1:6379/0]

The old codec is read from git (``git show REV:engine/codec/<file>`` for every file of
the package at ``--old``, by default the last commit with the msgpack codec) into a
temporary package, ``old_codec``, and imported beside the current one; it shares
``phasegraph.model`` and ``phasegraph.errors`` with it. Before anything is timed, both
must write the same bytes for every payload and decode them to equal values.

Everything is measured in this one process, old and new interleaved (each round times
every case once, the order of old and new alternating between rounds); the numbers
printed are medians over ``--rounds`` rounds:

* **µs per call** of ``encode_record`` / ``decode_record`` (a record as the loop of
  ``loop.yaml`` writes it, and one with every field set) and ``encode_snapshot`` /
  ``decode_snapshot`` (a small state, and states with about 100 KB of data: 500 nested
  documents, or one 100 KB string). Each timing is a batch of calls of about 20 ms.
* **history**: a ``--steps``-step run of ``loop.yaml`` per store, then a full history
  read: *old* is the read path of the old revision (every record read, then decoded
  with the old codec under its ``collector_paused``, one ``decode_stored`` call per
  record), *new* is ``Engine.history``. For the new path the read is split into the
  store read alone (``Store.history`` into a list) and the decoding of those bytes
  (``decode_history``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from phasegraph import Engine, codec, open_store
from phasegraph.model import (
    RunState,
)
from phasegraph.run._stored import decode_history, decode_stored

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the run states the codec tests use, every field set
from payloads import T0, golden_record, golden_state, loop_record  # noqa: E402

GRAPH = Path(__file__).with_name("loop.yaml")


def old_codec(rev: str, into: Path) -> ModuleType:
    """The package ``engine/codec`` of git revision ``rev``, importable as ``old_codec``."""
    package = into / "old_codec"
    package.mkdir()
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", f"{rev}:engine/codec"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in names:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:engine/codec/{name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (package / name).write_text(source.replace("phasegraph.codec", "old_codec"))
    sys.path.insert(0, str(into))
    return importlib.import_module("old_codec")


# --------------------------------------------------------------------------- payloads


def with_data(data: dict[str, Any]) -> RunState:
    """The tests' run state with every field set, holding ``data``."""
    return dataclasses.replace(golden_state(), data=MappingProxyType(data))


def documents(count: int = 500) -> dict[str, Any]:
    """About 100 KB of nested user data: ``count`` small documents."""
    return {
        "documents": [
            {
                "id": index,
                "title": f"document {index}",
                "body": "lorem ipsum dolor sit amet " * 5,
                "tags": ["alpha", "beta", str(index % 7)],
                "score": index / 3,
                "seen": T0 + timedelta(seconds=index),
            }
            for index in range(count)
        ]
    }


# --------------------------------------------------------------------------- timing


def per_call(fn: Callable[[], Any], seconds: float = 0.02) -> tuple[Callable[[], float], int]:
    """A timer of one batch of ``fn`` calls (about ``seconds`` long), in µs per call."""
    number, started = 1, time.perf_counter()
    while True:
        for _ in range(number):
            fn()
        if time.perf_counter() - started > seconds / 4:
            break
        number *= 2
    number = max(1, int(number * seconds / max(time.perf_counter() - started, 1e-9)))

    def timed() -> float:
        started = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - started) * 1e6 / number

    return timed, number


def codec_cases(old: ModuleType) -> dict[str, dict[str, Callable[[], Any]]]:
    """Case name → {"old": call, "new": call}; checks both write and read the same."""
    payloads: list[tuple[str, str, Any]] = [
        ("record", "loop record", loop_record()),
        ("record", "full record", golden_record()),
        ("snapshot", "small state", golden_state()),
        ("snapshot", "100 KB state, 500 documents", with_data(documents())),
        ("snapshot", "100 KB state, one string", with_data({"text": "x" * 100 * 1024})),
    ]
    cases: dict[str, dict[str, Callable[[], Any]]] = {}
    for kind, name, value in payloads:
        encode = {"old": getattr(old, f"encode_{kind}"), "new": getattr(codec, f"encode_{kind}")}
        decode = {"old": getattr(old, f"decode_{kind}"), "new": getattr(codec, f"decode_{kind}")}
        data = encode["new"](value)
        if encode["old"](value) != data:
            raise SystemExit(f"{name}: the old and new codec write different bytes")
        if not decode["old"](data) == decode["new"](data) == value:
            raise SystemExit(f"{name}: the old and new codec read different values")
        size = f"{len(data):,} B"
        for op, fns in (("encode", encode), ("decode", decode)):
            arg = value if op == "encode" else data
            cases[f"{op} {name} ({size})"] = {
                who: (lambda fn=fn, arg=arg: fn(arg)) for who, fn in fns.items()
            }
    return cases


def run_codec(old: ModuleType, rounds: int) -> None:
    cases = codec_cases(old)
    timers = {
        (case, who): per_call(fn)[0] for case, fns in cases.items() for who, fn in fns.items()
    }
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in timers}
    for round_ in range(rounds):
        order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
        for case in cases:
            for who in order:
                samples[case, who].append(timers[case, who]())
    print(f"codec, µs per call (medians of {rounds} interleaved rounds)")
    print(f"{'case':<52} {'old':>9} {'new':>9} {'speed-up':>9}")
    for case in cases:
        before = statistics.median(samples[case, "old"])
        after = statistics.median(samples[case, "new"])
        print(f"{case:<52} {before:9.2f} {after:9.2f} {before / after:8.1f}x")


async def run_history(old: ModuleType, url: str, steps: int, rounds: int) -> None:
    async with open_store(url) as store:
        engine = Engine(store)
        state = await engine.run(engine.prepare(GRAPH), {"steps": steps})
        if str(state.status) != "completed":
            raise SystemExit(f"benchmark run did not complete: {state.status}")
        run_id = state.run_id

        async def read() -> list[tuple[int, bytes]]:
            return [item async for item in store.history(run_id)]

        async def old_history() -> list[Any]:  # Engine.history of the old revision
            stored = await read()
            with old.collector_paused():
                return [decode_stored(run_id, seq, blob, old.decode_record) for seq, blob in stored]

        async def new_history() -> list[Any]:
            return await engine.history(run_id)

        stored = await read()
        expected = await old_history()
        if await new_history() != expected or len(expected) != steps + 2:
            raise SystemExit("the old and new history differ")
        samples: dict[str, list[float]] = {"old": [], "new": [], "read": [], "decode": []}
        for round_ in range(rounds):
            order = (old_history, new_history) if round_ % 2 == 0 else (new_history, old_history)
            for fn in order:
                started = time.perf_counter()
                records = await fn()
                samples["old" if fn is old_history else "new"].append(time.perf_counter() - started)
                del records
            started = time.perf_counter()
            stored = await read()
            samples["read"].append(time.perf_counter() - started)
            started = time.perf_counter()
            records = decode_history(run_id, stored)
            samples["decode"].append(time.perf_counter() - started)
            del records, stored
    ms = {key: statistics.median(values) * 1e3 for key, values in samples.items()}
    print(
        f"{url.split(':')[0]:<7} {ms['old']:8.1f} ms {ms['new']:8.1f} ms "
        f"{ms['old'] / ms['new']:8.1f}x   new = read {ms['read']:.1f} ms "
        f"+ decode {ms['decode']:.1f} ms ({ms['decode'] * 1e3 / (steps + 2):.2f} µs/record)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="fda2748", help="git revision of the old codec")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--redis", default=None, help="also measure history on this URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = old_codec(args.old, Path(tmp))
        run_codec(old, args.rounds)
        print(f"\nEngine.history of {args.steps} steps (medians of {args.rounds} rounds)")
        print(f"{'store':<7} {'old':>11} {'new':>11} {'speed-up':>9}")
        urls = ["memory://", f"sqlite:///{tmp}/bench.db"]
        for url in [*urls, *([args.redis] if args.redis else [])]:
            await run_history(old, url, args.steps, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
