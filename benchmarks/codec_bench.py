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
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from phasegraph import Engine, codec, open_store
from phasegraph.model import (
    ErrorRecord,
    Interrupt,
    NodeOutcome,
    NodeState,
    NodeStatus,
    RunState,
    RunStatus,
    StepRecord,
)
from phasegraph.run import decode_history, decode_stored

REPO = Path(__file__).resolve().parent.parent
GRAPH = Path(__file__).with_name("loop.yaml")
T0 = datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


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


def loop_record(seq: int = 7) -> StepRecord:
    """A record as the loop of ``loop.yaml`` writes it: what a history read is made of."""
    node = NodeState(
        status=NodeStatus.RUNNING,
        path=("work",),
        counters=MappingProxyType({"steps": seq}),
        steps=seq - 1,
    )
    return StepRecord(
        seq=seq,
        time=T0 + timedelta(milliseconds=seq),
        kind="transition",
        node="loop",
        source=("work",),
        trigger="again",
        dest=("work",),
        result=MappingProxyType({"trigger": "again"}),
        nodes=MappingProxyType({"loop": node}),
    )


def small_state(data: dict[str, Any] | None = None) -> RunState:
    """A run state with every field set; ``data`` replaces its data."""
    return RunState(
        run_id="run-0001",
        graph="review",
        graph_source="graphs/review.yaml",
        graph_digest="sha256:5f1d",
        seq=7,
        status=RunStatus.WAITING,
        input=MappingProxyType({"task": "fix the build", "limits": {"think": 7}}),
        data=MappingProxyType(
            data
            if data is not None
            else {"plan": ["read", "edit", "test"], "score": 0.75, "when": T0, "ok": True}
        ),
        nodes=MappingProxyType(
            {
                "plan": NodeState(
                    status=NodeStatus.COMPLETED,
                    path=("done",),
                    outcome=NodeOutcome.SUCCESS,
                    counters=MappingProxyType({"think": 3}),
                    steps=4,
                ),
                "review": NodeState(
                    status=NodeStatus.WAITING,
                    path=("review_pending", "ask"),
                    counters=MappingProxyType({"verify": 1}),
                    steps=2,
                    payload=MappingProxyType({"feedback": "add tests"}),
                ),
            }
        ),
        interrupts=MappingProxyType(
            {
                "gate": Interrupt(
                    id="gate",
                    node="review",
                    kind="review",
                    payload=MappingProxyType({"spec": "v2", "files": ["a.py"]}),
                    deadline=T0 + timedelta(minutes=30),
                    created_at=T0,
                )
            }
        ),
        errors=(
            ErrorRecord(
                time=T0,
                node="plan",
                state="think",
                message="provider timed out",
                details=MappingProxyType({"error_code": "timeout"}),
            ),
        ),
        writers=MappingProxyType({"plan": ("plan",), "score": ("plan", "review")}),
        created_at=T0,
        updated_at=T0 + timedelta(seconds=1),
    )


def full_record() -> StepRecord:
    """A record with every field set (errors, interrupts, events, nested data)."""
    state = small_state()
    return StepRecord(
        seq=8,
        time=T0,
        kind="transition",
        node="review",
        source=("review_pending", "ask"),
        trigger="confirm",
        dest=("executing",),
        result=MappingProxyType({"trigger": "confirm", "payload": {"ok": True}}),
        data=MappingProxyType({"approved": True, "reviewer": "ana"}),
        nodes=MappingProxyType({"review": NodeState(status=NodeStatus.RUNNING)}),
        status=RunStatus.RUNNING,
        errors=state.errors,
        interrupts=state.interrupts,
        events=(MappingProxyType({"type": "reply", "id": "gate"}),),
    )


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
        ("record", "full record", full_record()),
        ("snapshot", "small state", small_state()),
        ("snapshot", "100 KB state, 500 documents", small_state(documents())),
        ("snapshot", "100 KB state, one string", small_state({"text": "x" * 100 * 1024})),
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
