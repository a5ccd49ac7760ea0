"""What a streamed model turn costs: instructions per model delta and bytes stored per turn.

Run from the repository root (needs valgrind)::

    .venv/bin/python benchmarks/stream_cost.py [--words 50,250] [--store sqlite]

The model is ``phasegraph model-server`` in a process of its own (its CPU is not
counted), streaming one answer of N words (a delta each). One agent node answers it on
the SQLite store (``--store memory`` for the memory store), in three ways side by side:

- ``stream: false``: the answer arrives whole (no deltas);
- ``stream: true``: each delta gets its id and is kept in memory until the turn
  commits (what a client that reconnects is served from); nothing is written per delta;
- ``stream: true, --durable-stream``: the deltas are also written to the store in
  batches, and dropped when the turn commits;

and beside them the floor: ``bare openai stream``, one ``openai.AsyncOpenAI`` client
reading the same streamed answer chunk by chunk (what parsing the stream costs anyway).

Instructions are counted under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``
for a short and a long answer; the difference over the difference of words is a delta's
cost (start-up, imports, the turn's own steps cancel out). Bytes are counted in a run of
the long answer without valgrind: the bytes of every commit (records, snapshots) and of
every live-event batch the store was handed, per turn.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _callgrind import instructions

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("phasegraph")

_CHILD = r"""
import asyncio, json, sys
from phasegraph import Engine, StreamSettings, open_store
from phasegraph.spec import load_graph_text
from phasegraph.store.base import ForwardingStore

class Counting(ForwardingStore):
    committed = streamed = 0
    async def commit(self, lease, commit):
        Counting.committed += len(commit.record) + len(commit.snapshot or b"")
        await super().commit(lease, commit)
    async def append_stream(self, run_id, batch):
        Counting.streamed += len(batch)
        await super().append_stream(run_id, batch)

async def main(stream, durable, url):
    node = {
        "id": "agent", "machine": "agent",
        "bind": {
            "think": {"llm": {"model": "m", "prompt": "talk", "tools": [], "stream": stream}},
            "act": {"tools": "conversation"},
        },
    }
    definition = load_graph_text(json.dumps({"graph": "talk", "nodes": [node]}), name="t.yaml")
    async with open_store(url) as inner:
        store = Counting(inner)
        async with Engine(store, streams=StreamSettings(durable=durable)) as engine:
            state = await engine.run(definition, {})
            await engine.streams.idle()
    assert state.status == "completed", state.nodes["agent"].error
    print(json.dumps({"committed": Counting.committed, "streamed": Counting.streamed}))

asyncio.run(main(sys.argv[1] == "1", sys.argv[2] == "1", sys.argv[3]))
"""

_BARE = r"""
import asyncio, sys
import openai

async def main(base_url):
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused") as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "talk"}], stream=True
        )
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
    assert text

asyncio.run(main(sys.argv[1]))
"""

_MODES = (
    ("stream: false", False, False),
    ("stream: true", True, False),
    ("stream: true, --durable-stream", True, True),
)


_FLOOR = "bare openai stream"


class _ModelServer:
    """``phasegraph model-server`` streaming one answer of ``words`` words."""

    def __init__(self, words: int, folder: Path) -> None:
        script = folder / f"answer-{words}.json"
        text = " ".join(f"word{n}" for n in range(words))
        script.write_text(json.dumps([{"content": text}]))
        self.process = subprocess.Popen(
            [str(SCRIPT), "model-server", "--script", str(script), "--quiet"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def _store_url(kind: str, folder: Path) -> str:
    if kind == "memory":
        return "memory://"
    db = folder / "runs.db"
    db.unlink(missing_ok=True)
    return f"sqlite:///{db}"


def _child(folder: Path, words: int, mode: tuple[str, bool, bool], kind: str, counted: bool) -> Any:
    _, stream, durable = mode
    server = _ModelServer(words, folder)
    try:
        env = dict(os.environ, PHASEGRAPH_LLM_BASE_URL=server.base_url, PYTHONHASHSEED="0")
        child = folder / "child.py"
        if mode[0] == _FLOOR:
            child.write_text(_BARE)
            return instructions([str(child), server.base_url], env, folder)
        child.write_text(_CHILD)
        argv = [str(child), str(int(stream)), str(int(durable)), _store_url(kind, folder)]
        if counted:
            return instructions(argv, env, folder)
        done = subprocess.run(
            [sys.executable, *argv], env=env, check=True, capture_output=True, text=True
        )
        return json.loads(done.stdout)
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", default="50,250", help="the short and long answer (50,250)")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()
    low, high = (int(n) for n in args.words.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        floor_mode = (_FLOOR, True, False)
        short = _child(folder, low, floor_mode, args.store, counted=True)
        floor = (_child(folder, high, floor_mode, args.store, counted=True) - short) / (high - low)
        for mode in _MODES:
            short = _child(folder, low, mode, args.store, counted=True)
            long = _child(folder, high, mode, args.store, counted=True)
            written = _child(folder, high, mode, args.store, counted=False)
            rows.append((mode[0], (long - short) / (high - low), written))
    print(
        f"one streamed turn on the {args.store} store: instructions per model delta "
        f"(difference of {high} and {low} words) and bytes stored per turn of {high} words"
    )
    print("| mode | Ir per word | over the bare stream | bytes committed | bytes of live batches |")
    print("|---|---|---|---|---|")
    print(f"| {_FLOOR} | {floor:,.0f} | — | — | — |")
    for name, per_delta, written in rows:
        print(
            f"| {name} | {per_delta:,.0f} | {per_delta - floor:+,.0f} | "
            f"{written['committed']:,} | {written['streamed']:,} |"
        )


if __name__ == "__main__":
    main()
