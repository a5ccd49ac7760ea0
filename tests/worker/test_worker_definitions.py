"""Workers and stored definitions: a run whose definition one worker cannot load moves on.

A run follows the definition it stored; its Python actions are imported by whichever
worker drives it. A worker that lacks a module the run's actions import says so once,
naming the run and its version, and leaves the run for the other workers, which drive
it to its end.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from test_workers import submit, wait_for, workers

from phasegraph import Engine, open_store
from phasegraph.model import RunStatus

GRAPH = """graph: elsewhere
nodes:
  - id: work
    machine: task
    bind:
      run: {python: "only_here:ok", triggers: [ok]}
"""

ACTION = """from phasegraph.actions import ActionResult


def ok(ctx):
    return ActionResult(trigger="ok")
"""


async def test_a_worker_without_a_runs_module_leaves_it_for_one_that_has_it(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "only_here.py").write_text(ACTION, encoding="utf-8")
    monkeypatch.syspath_prepend(str(code))  # this process creates the run: it loads it
    graph = tmp_path / "graph" / "elsewhere.yaml"
    graph.parent.mkdir()
    graph.write_text(GRAPH, encoding="utf-8")
    marks = tmp_path / "marks.txt"
    async with open_store(store_url) as store:
        engine = Engine(store)
        (run_id,) = await submit(engine, graph, {}, 1)
        version = (await engine.get(run_id)).graph_digest
        lacking = tmp_path / "lacking"
        lacking.mkdir()
        with workers(store_url, 1, lacking / "marks.txt", quiet=False) as without:
            log = lacking / "worker0.log"
            while "left for another worker" not in log.read_text():
                assert without[0].poll() is None, log.read_text()
                await asyncio.sleep(0.1)
            has = {"PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
            with workers(store_url, 1, marks, env=has, first=1) as able:
                await wait_for(store, [run_id], RunStatus.COMPLETED, able)
        said = log.read_text()
    assert said.count("left for another worker") == 1, said  # once, however often it came back
    assert f"run {run_id} follows version {version[:12]}" in said
    assert "only_here" in said  # what it lacks
    assert "Traceback" not in said
