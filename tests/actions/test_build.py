"""Every action kind the graph format accepts is one ``run`` can build: check never passes
what run refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from http_kit import Server
from phasegraph.actions._build import BUILDERS
from phasegraph.analysis import Severity, check
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.spec._models import ACTION_KINDS
from phasegraph.store import open_store
from phasegraph.worker import drive_locally

GATES = {"human", "plan", "graph"}
"""Kinds the interpreter carries out itself (a gate, a plan, a child run) rather than a
callable."""

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
PLAN_NODE = {
    "id": "step",
    "machine": "plan",
    "writes": ["plan"],
    "bind": {
        "plan": {"python": "plan_actions:one_item", "triggers": ["planned"]},
        "children": {
            "plan": {
                "from": "plan",
                "id": "id",
                "template": {
                    "machine": "task",
                    "bind": {"run": {"python": "phasegraph.graphs.hello:plan", "triggers": ["ok"]}},
                },
            }
        },
    },
}
"""A node whose plan (of one item, by a planner in the fixtures) makes one child."""

MODEL_KINDS = {"llm", "tools"}
"""Kinds that run in the ``agent`` machine, against a scripted model."""

AGENT_BINDING = {
    "think": {"llm": {"model": "scripted", "tools": ["list_files"]}},
    "act": {"tools": "conversation"},
}
SCRIPT = [{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"content": "done"}]


def sample(kind: str, server: Server) -> dict[str, Any]:
    """A binding of ``kind`` for the ``task`` machine's ``run`` hook."""
    if kind in MODEL_KINDS or kind in ("plan", "graph"):
        return {}
    samples: dict[str, dict[str, Any]] = {
        "python": {"python": "phasegraph.graphs.hello:plan", "triggers": ["ok"]},
        "shell": {"shell": [sys.executable, "-c", "pass"]},
        "http": {"http": {"url": server.url + "/text"}},
        "human": {"human": "review", "triggers": ["ok", "fail"]},
    }
    return samples[kind]  # a new kind needs a sample here


def test_every_kind_has_a_builder_or_is_a_gate() -> None:
    assert set(BUILDERS) | GATES == set(ACTION_KINDS)
    assert not set(BUILDERS) & GATES


@pytest.mark.parametrize("kind", ACTION_KINDS)
async def test_a_graph_using_each_kind_checks_and_runs(
    kind: str, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"{kind}.yaml"
    monkeypatch.syspath_prepend(str(FIXTURES))
    graph = {"nodes": [{"id": "step", "machine": "task", "bind": {"run": sample(kind, server)}}]}
    if kind == "plan":
        graph = {"nodes": [PLAN_NODE]}
    if kind == "graph":  # a run of the built-in hello graph, as a run of its own
        child = {"graph": {"graph": "hello", "input": {"who": "child"}}}
        graph = {"nodes": [{"id": "step", "machine": "child_run", "bind": {"run": child}}]}
    if kind in MODEL_KINDS:
        (tmp_path / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
        settings = {"llm": {"script": "script.json"}, "workspace": str(tmp_path)}
        node = {"id": "step", "machine": "agent", "with": settings, "bind": AGENT_BINDING}
        graph = {"nodes": [node]}
    path.write_text(yaml.safe_dump(graph), encoding="utf-8")
    report = check(path)
    assert report.kind == "graph"
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []
    async with open_store("memory://") as store:
        engine = Engine(store)
        state = await engine.run(path)
        if kind == "graph":
            state = await drive_locally(engine, state.run_id)  # drives the child run too
        if kind == "human":
            assert state.status is RunStatus.WAITING
            [interrupt] = state.interrupts
            state = await engine.reply(state.run_id, interrupt, "ok")
    assert state.status is RunStatus.COMPLETED, state.nodes["step"].error


def test_importing_phasegraph_leaves_aiohttp_and_openai_unloaded() -> None:
    """The http and llm actions load their clients when a graph binds one, not on import."""
    code = (
        "import sys, phasegraph, phasegraph.actions; "
        "print('aiohttp' in sys.modules, 'openai' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "False False"
