"""The model examples: ``research_agent`` offline, ``coding_task`` against an endpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.store import open_store
from phasegraph.testing import ScriptedModelServer

SCRIPT = Path(__file__).resolve().parents[2] / "graphs" / "coding_task.responses.json"


async def test_with_an_endpoint_set_the_model_there_does_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = json.loads(SCRIPT.read_text(encoding="utf-8"))
    async with ScriptedModelServer(script, by_turn=True) as server:
        monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("PHASEGRAPH_LLM_MODEL", "my-model")
        args = ["run", "coding_task", "--approve", "-q", "--store", "memory://"]
        # The CLI runs an event loop of its own; this one keeps serving meanwhile.
        code = await asyncio.to_thread(main, [*args, "--input", f"workdir={tmp_path}"])
    assert code == 0, capsys.readouterr().out
    # Every model call went to the endpoint, under the endpoint's model name.
    assert server.request_count == len(script)
    assert {r["model"] for r in server.requests} == {"my-model"}


def test_research_agent_compresses_with_the_auxiliary_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("PHASEGRAPH_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["run", "research_agent", "-q", "--store", store]) == 0
    run_id = capsys.readouterr().out.split()[1]

    async def read():
        async with open_store(store) as opened:
            engine = Engine(opened)
            return await engine.get(run_id), await engine.history(run_id)

    state, history = asyncio.run(read())
    compressions = [r for r in history if r.trigger == "compressed"]
    assert compressions
    for record in compressions:
        details = record.result["output"]["compression"]
        assert details["model"] == "summarizer"
        assert details["tokens_after"] < details["tokens_before"]
    assert state.data["report"].startswith("Report.")
    # The conversation stayed under the budget: no request was refused as too long.
    assert all(r.trigger != "error" for r in history)
