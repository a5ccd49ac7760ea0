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


async def test_open_reads_the_stored_definition_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reopened.yaml").write_text(GRAPH, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    loads = _count_loads(monkeypatch)
    async with MemoryStore() as store:
        engine = Engine(store)
        state = await engine.run("reopened.yaml")  # a relative spelling of the path
        assert state.graph_source == str(tmp_path / "reopened.yaml")
        (tmp_path / "reopened.yaml").unlink()  # the run needs its file no more
        for _ in range(3):
            async with engine.open(state.run_id) as run:
                assert run.state.seq == state.seq
        async with Engine(store).open(state.run_id) as run:  # another engine: from the store
            assert run.state.definition == state.definition
    assert loads == ["reopened.yaml"]  # the file was loaded once, to start the run


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
