"""Opening a run by its recorded graph reads the graph's YAML once, not once per open."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from phasegraph import spec
from phasegraph.api import Engine
from phasegraph.model import GraphDef
from phasegraph.store.memory import MemoryStore

GRAPH = """\
graph: reopened
nodes:
  - id: only
    machine: task
    bind:
      run: {shell: ["true"], on_exit: {0: ok, default: fail}}
"""


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loads: list[str] = []
    real = spec.load_graph

    def counting(source: Any) -> GraphDef:
        loads.append(str(source))
        return real(source)

    # The engine imports the loader when it first prepares a graph (reading needs none).
    monkeypatch.setattr(spec, "load_graph", counting)
    return loads


async def test_open_by_recorded_graph_loads_its_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reopened.yaml").write_text(GRAPH, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    loads = _count_loads(monkeypatch)
    async with MemoryStore() as store:
        engine = Engine(store)
        state = await engine.run("reopened.yaml")  # a relative spelling of the path
        assert state.graph_source == str(tmp_path / "reopened.yaml")
        for _ in range(3):
            async with engine.open(state.run_id) as run:  # the recorded, absolute spelling
                assert run.state.seq == state.seq
    assert loads == ["reopened.yaml", str(tmp_path / "reopened.yaml")]


async def test_a_changed_file_is_read_again_under_either_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reopened.yaml"
    path.write_text(GRAPH, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    loads = _count_loads(monkeypatch)
    async with MemoryStore() as store:
        engine = Engine(store)
        first = engine.prepare("reopened.yaml")
        assert engine.prepare(str(path)) is first
        path.write_text(GRAPH.replace('["true"]', '["true", "x"]'), encoding="utf-8")
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        changed = engine.prepare(str(path))
        assert engine.prepare(str(path)) is changed
    assert changed.definition.digest != first.definition.digest
    assert loads == ["reopened.yaml", str(path), str(path)]
