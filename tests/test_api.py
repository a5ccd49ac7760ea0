"""The Engine facade: graph loading is cached until a file changes."""

from __future__ import annotations

import os
from pathlib import Path

from builders import graph
from phasegraph.api import Engine
from phasegraph.store.memory import MemoryStore

GRAPH = """\
graph: cached
nodes:
  - id: only
    machine: task
    bind:
      run: {shell: ["true"], on_exit: {0: ok, default: fail}}
"""


async def test_prepared_graph_is_reused_until_its_file_changes(tmp_path: Path):
    path = tmp_path / "cached.yaml"
    path.write_text(GRAPH, encoding="utf-8")
    async with MemoryStore() as store:
        engine = Engine(store)
        first = engine.prepare(path)
        assert engine.prepare(path) is first
        assert engine.prepare("hello") is engine.prepare("hello")
        path.write_text(GRAPH.replace('["true"]', '["true", "x"]'), encoding="utf-8")
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        changed = engine.prepare(path)
    assert changed is not first
    assert changed.definition.digest != first.definition.digest


def test_a_long_lived_engine_keeps_a_bounded_number_of_prepared_graphs() -> None:
    # A server prepares every distinct upload: the engine must not keep them all.
    engine = Engine(MemoryStore())
    first = engine.prepare(graph([("a", ())], name="g0"))
    for i in range(1, 300):
        engine.prepare(graph([("a", ())], name=f"g{i}"))
    assert len(engine._prepared) <= 256  # white-box: memory held is what matters
    latest = engine.prepare(graph([("a", ())], name="g299"))
    assert engine.prepare(graph([("a", ())], name="g299")) is latest  # still cached
    assert engine.prepare(graph([("a", ())], name="g0")) is not first  # forgotten, rebuilt
