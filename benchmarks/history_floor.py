"""What ``Engine.history`` costs per record, part by part, against what 30 ms allows.

Run from the repository root (needs valgrind)::

    .venv/bin/python benchmarks/history_floor.py [--records 2000] [--base DIR]

A run of ``--records`` steps of ``loop.yaml`` is written to a throwaway SQLite store
(outside the counts). Each part of a history read is then counted by callgrind on its own
(``PYTHONHASHSEED=0``, the part done once and six times in two processes: the difference
over five, per record, so start-up and the store's set-up cancel):

* **store read** — ``Store.history_list``: the rows fetched by ``sqlite3`` on the store's
  thread, handed to the event loop;
* **checksums** — each record's CRC checked (``codec._checksum.verified``);
* **decode** — each record's bytes decoded by msgspec into the wire structs, their layout
  checked (``codec._envelope``'s record decoder);
* **model** — each decoded body built into a ``StepRecord`` (``codec._wire.step_record``);
* **Engine.history** — the whole read, these and the checks that join them.

The first three are what any read of the stored format must do before a model value
exists. Then, outside valgrind, ``Engine.history`` of a 10,000-step run is timed as
``targets.py --cases read`` times the goal (its ``_read``, in a fresh process), with the
machine's load beside it. At the instructions per record counted above, that gives the
machine's instructions per second, which turn "10,000 records in 30 ms" into
instructions per record on this machine today.
With ``--base DIR`` another checkout's ``engine/`` is counted beside this one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import targets
from _callgrind import instructions, with_checkout

from phasegraph import Engine, open_store

HERE = Path(__file__).resolve().parent
PARTS = ("store read", "checksums", "decode", "model", "Engine.history")
FEW, MANY = 1, 6
GOAL_MS, GOAL_RECORDS = 30.0, 10_000

_CHILD = r"""
import asyncio, sys
from phasegraph import Engine, open_store
from phasegraph.codec import _envelope, _wire
from phasegraph.codec._checksum import verified

async def main(db, run_id, part, count):
    async with open_store("sqlite:///" + db) as store:
        engine = Engine(store)
        stored = await store.history_list(run_id)
        blobs = [blob for _, blob in stored]
        decode = _envelope._DECODE_RECORD
        bodies = [decode(blob).body for blob in blobs]
        await engine.history(run_id)  # every path taken once before the counted ones
        for _ in range(count):
            if part == "store read":
                await store.history_list(run_id)
            elif part == "checksums":
                [verified(blob) for blob in blobs]
            elif part == "decode":
                [decode(blob) for blob in blobs]
            elif part == "model":
                [_wire.step_record(body) for body in bodies]
            else:
                await engine.history(run_id)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def _write_run(db: Path, records: int) -> str:
    async with open_store(f"sqlite:///{db}") as store:
        engine = Engine(store)
        # A run of N steps has N + 2 records: its creation and the node's start.
        state = await engine.run(engine.prepare(HERE / "loop.yaml"), {"steps": records - 2})
        return state.run_id


def _per_record(root: Path | None, db: Path, run_id: str, part: str, records: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(_CHILD)
        env = with_checkout(dict(os.environ, PYTHONHASHSEED="0"), root, Path(tmp))
        counts = [
            instructions([str(script), str(db), run_id, part, str(count)], env, Path(tmp))
            for count in (FEW, MANY)
        ]
    return (counts[1] - counts[0]) / (MANY - FEW) / records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--base", type=Path, help="another checkout, counted as 'before'")
    parser.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time:  # the timing child: the goal's read, in milliseconds
        with tempfile.TemporaryDirectory() as tmp:
            read = asyncio.run(targets._read(f"sqlite:///{tmp}/runs.db", GOAL_RECORDS))
        print(read["history_ms"])
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.db"
        run_id = asyncio.run(_write_run(db, args.records))
        print(f"{'part':16} {'Ir per record':>14}" + ("   before   after/before" * bool(args.base)))
        counted = {}
        for part in PARTS:
            counted[part] = _per_record(None, db, run_id, part, args.records)
            line = f"{part:16} {counted[part]:14,.0f}"
            if args.base is not None:
                before = _per_record(args.base, db, run_id, part, args.records)
                line += f"   {before:6,.0f}   {counted[part] / before:.3f}"
            print(line, flush=True)
        floor = sum(counted[part] for part in PARTS[:3])
        print(f"{'first three':16} {floor:14,.0f}   (no model value built)")
    timed = subprocess.run(
        [sys.executable, __file__, "--time"], check=True, capture_output=True, text=True
    )
    ms, load, each = float(timed.stdout), os.getloadavg()[0], counted["Engine.history"]
    speed = each * GOAL_RECORDS / ms / 1e6  # G instructions a second
    budget = each * GOAL_MS / ms  # instructions per record that speed does in GOAL_MS
    print(
        f"Engine.history of {GOAL_RECORDS:,} records: {ms:.1f} ms here "
        f"(load {load:.1f} on {os.cpu_count()} CPUs), {speed:.2f} G Ir/s;\n"
        f"{GOAL_RECORDS:,} records in {GOAL_MS:.0f} ms at that speed allow "
        f"{budget:,.0f} Ir per record, {floor / budget:.2f}x of which the stored format's "
        "read, checksums and decode take"
    )


if __name__ == "__main__":
    main()
