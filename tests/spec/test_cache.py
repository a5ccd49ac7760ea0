"""The compiled-graph cache: read back while every file is unchanged, never stale, never wrong.

Every case compares what :func:`phasegraph.spec.load_graph` (the cached way) returns with
what the loader returns reading the files itself.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phasegraph.api import Engine
from phasegraph.errors import InputError, SpecError
from phasegraph.model import GraphDef
from phasegraph.spec import load_graph
from phasegraph.spec._cache import remember_valid, valid_before
from phasegraph.spec._catalog import builtin_graphs
from phasegraph.spec._loader import load_graph as load_fresh
from phasegraph.store import open_store

MACHINE = """\
machine: step
initial: ready
states:
  ready: {hook: run}
  done: {final: success}
  failed: {final: failed}
transitions:
  - {trigger: ok, source: ready, dest: done}
  - {trigger: fail, source: ready, dest: failed}
"""
GRAPH = """\
graph: cached
description: DESCRIPTION
machines: [step.yaml]
input:
  type: object
  required: [who]
  properties: {who: {type: string}}
nodes:
  - id: first
    machine: step
    bind: {run: {shell: ["true"]}}
"""


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PHASEGRAPH_CACHE_DIR", str(folder))
    return folder


def _graph(folder: Path, description: str = "one") -> Path:
    (folder / "step.yaml").write_text(MACHINE, encoding="utf-8")
    path = folder / "graph.yaml"
    path.write_text(GRAPH.replace("DESCRIPTION", description), encoding="utf-8")
    return path


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.graph"))


def _read_only(definition: GraphDef) -> None:
    assert isinstance(definition.machines, MappingProxyType)
    node = definition.nodes[0]
    assert isinstance(node.bind, MappingProxyType)
    assert isinstance(node.bind["run"].config, MappingProxyType)
    assert isinstance(definition.machines["step"].states, MappingProxyType)


def test_a_graph_read_back_equals_the_loaded_one(tmp_path: Path, cache: Path) -> None:
    path = _graph(tmp_path)
    first = load_graph(path)
    assert len(_entries(cache)) == 1
    again = load_graph(path)
    assert again == first == load_fresh(path)
    assert again.digest == first.digest
    assert again.nodes[0].location == first.nodes[0].location  # messages still point home
    _read_only(again)


@pytest.mark.parametrize("name", builtin_graphs())
def test_every_built_in_graph_reads_back_as_it_loads(name: str, cache: Path) -> None:
    load_graph(name)
    assert load_graph(name) == load_fresh(name)


def test_an_edited_machine_file_is_loaded_again(tmp_path: Path, cache: Path) -> None:
    path = _graph(tmp_path)
    before = load_graph(path)
    machine = tmp_path / "step.yaml"
    machine.write_text(MACHINE.replace("done", "finished"), encoding="utf-8")
    after = load_graph(path)
    assert after == load_fresh(path)
    assert after.digest != before.digest
    assert "finished" in after.machines["step"].states


def test_an_edited_graph_file_is_loaded_again(tmp_path: Path) -> None:
    path = _graph(tmp_path, "one")
    assert load_graph(path).description == "one"
    _graph(tmp_path, "two")
    assert load_graph(path).description == "two"
    _graph(tmp_path, "one")  # back as it was: the first entry fits again
    assert load_graph(path) == load_fresh(path)


def test_a_machine_file_gone_is_the_loaders_error(tmp_path: Path) -> None:
    path = _graph(tmp_path)
    load_graph(path)
    (tmp_path / "step.yaml").unlink()
    with pytest.raises(SpecError, match=r"machine file 'step\.yaml' not found"):
        load_graph(path)


def test_a_graph_that_does_not_load_is_never_kept(tmp_path: Path, cache: Path) -> None:
    path = _graph(tmp_path)
    path.write_text(GRAPH.replace("machine: step", "machine: nowhere"), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(SpecError, match="nowhere"):
            load_graph(path)
    assert _entries(cache) == []


def test_a_damaged_entry_is_a_miss(tmp_path: Path, cache: Path) -> None:
    path = _graph(tmp_path)
    first = load_graph(path)
    [entry] = _entries(cache)
    header = entry.read_bytes().partition(b"\n")[0]
    entry.write_bytes(header + b"\nnot msgpack at all")
    assert load_graph(path) == first
    entry.write_bytes(b"")
    assert load_graph(path) == first


def test_a_folder_that_cannot_be_written_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be", encoding="utf-8")
    monkeypatch.setenv("PHASEGRAPH_CACHE_DIR", str(blocked / "cache"))
    path = _graph(tmp_path)
    assert load_graph(path) == load_fresh(path)
    assert load_graph(path) == load_fresh(path)


def test_an_empty_cache_variable_turns_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path
) -> None:
    monkeypatch.setenv("PHASEGRAPH_CACHE_DIR", "")
    path = _graph(tmp_path)
    assert load_graph(path) == load_fresh(path)
    assert not cache.exists()


@given(st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=40))
def test_whatever_the_graph_says_the_cache_gives_what_the_loader_gives(
    tmp_path_factory: pytest.TempPathFactory, description: str
) -> None:
    folder = tmp_path_factory.mktemp("graph")
    path = _graph(folder, json.dumps(description, ensure_ascii=False))
    load_graph(path)
    assert load_graph(path) == load_fresh(path)


def test_an_input_that_passed_is_remembered_and_one_that_failed_is_not(tmp_path: Path) -> None:
    definition = load_graph(_graph(tmp_path))
    schema = definition.input_schema
    assert schema is not None
    assert not valid_before(schema, {"who": "x"})
    remember_valid(schema, {"who": "x"})
    assert valid_before(schema, {"who": "x"})
    assert not valid_before(schema, {"who": "y"})
    assert not valid_before({**schema, "required": []}, {"who": "x"})  # another schema


def test_a_bad_input_is_refused_after_a_good_one(tmp_path: Path) -> None:
    path = _graph(tmp_path)

    async def start(run_input: dict[str, object]) -> str:
        async with open_store("memory://") as store:
            return (await Engine(store).run(path, run_input)).status

    assert asyncio.run(start({"who": "x"})) == "completed"
    assert asyncio.run(start({"who": "x"})) == "completed"
    with pytest.raises(InputError, match="'who' is a required property"):
        asyncio.run(start({}))
    with pytest.raises(InputError, match="is not of type 'string'"):
        asyncio.run(start({"who": 1}))


def _age(folder: Path) -> None:
    """Date every entry of ``folder`` a second apart, oldest first (the clock is coarse)."""
    for seconds, entry in enumerate(sorted(folder.iterdir(), key=lambda e: e.stat().st_mtime_ns)):
        os.utime(entry, ns=(seconds * 10**9, seconds * 10**9))


def test_the_folder_keeps_the_most_recent_entries(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("phasegraph.spec._cache.KEPT", 2)
    for description in ("one", "two", "three"):
        load_graph(_graph(tmp_path, description))
        _age(cache)
    assert len(_entries(cache)) == 2
    assert load_graph(_graph(tmp_path, "three")).description == "three"
    schema = {"type": "object"}
    for who in ("a", "b", "c"):
        remember_valid(schema, {"who": who})
        _age(cache / "inputs")
    assert len(list((cache / "inputs").iterdir())) == 2
    assert valid_before(schema, {"who": "c"})
    assert not valid_before(schema, {"who": "a"})
