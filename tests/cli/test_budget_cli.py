"""The run's budget on the command line: ``check`` proves every model call is under a
finite one when the graph requires it, ``status`` shows what is left, ``reply`` adds more."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from builders import cli_argv
from model_kit import ENDPOINT_VARIABLES, agent_node, call, graph_text
from phasegraph.testing import ScriptedModelServer

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, env=env, timeout=120, check=False
    )


async def _acli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command line in a subprocess while this loop serves the model."""
    process = await asyncio.create_subprocess_exec(
        *cli_argv(*args), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return subprocess.CompletedProcess(args, process.returncode, out.decode(), err.decode())


def _graph(tmp_path: Path, budget: dict[str, Any], **llm: Any) -> Path:
    node = agent_node({"tools": ["list_files"], **llm}, settings={"workspace": str(tmp_path)})
    path = tmp_path / "agent.yaml"
    # Block YAML, as a user writes it (check tells a graph file by its top-level keys).
    document = json.loads(graph_text(node, budget=budget))
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_check_names_each_model_call_not_under_a_finite_budget(tmp_path: Path) -> None:
    # Money only, and the model has no price; no max_tokens either.
    graph = _graph(
        tmp_path, {"money": 1.0, "prices": {"other": {"input": 1, "output": 2}}, "required": True}
    )
    done = _cli("check", str(graph), "--json")
    assert done.returncode != 0, done.stdout
    found = [f for f in json.loads(done.stdout) if f["code"] == "unbudgeted-model-call"]
    [finding] = found
    assert finding["severity"] == "error"
    assert finding["line"]
    assert "node 'agent'" in finding["message"]
    assert "hook 'think'" in finding["message"]
    assert "'main' has no price" in finding["message"]
    assert "no max_tokens" in finding["message"]

    # Priced, with max_tokens: proved, nothing found.
    priced = {"money": 1.0, "prices": {"main": {"input": 1, "output": 2}}, "required": True}
    graph = _graph(tmp_path, priced, max_tokens=500)
    done = _cli("check", str(graph), "--json")
    assert "unbudgeted-model-call" not in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr

    # A call whose answer alone is more than the token limit never fits: a warning.
    graph = _graph(tmp_path, {"tokens": 1000}, max_tokens=2000)
    done = _cli("check", str(graph), "--json")
    [over] = [f for f in json.loads(done.stdout) if f["code"] == "model-call-over-budget"]
    assert over["severity"] == "warning"
    assert "max_tokens (2000) alone is more than the run's budget of 1000" in over["message"]

    # Not required: a call without a limit is the graph's business.
    graph = _graph(tmp_path, {"money": 1.0})
    assert "unbudgeted-model-call" not in _cli("check", str(graph), "--json").stdout


async def test_status_shows_the_budget_left_and_a_reply_adds_more(tmp_path: Path) -> None:
    turn = {"tool_calls": [call("list_files", path=".")], "usage": USAGE}
    server = ScriptedModelServer([turn] * 6 + [{"content": "done", "usage": USAGE}], by_turn=True)
    await server.start()
    try:
        env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
        env["PHASEGRAPH_LLM_BASE_URL"] = server.base_url
        prices = {"main": {"input": 2.0, "output": 10.0}}
        graph = _graph(tmp_path, {"tokens": 5_000, "prices": prices}, max_tokens=1_500)
        store = ["--store", f"sqlite:///{tmp_path / 'runs.db'}"]
        ran = await _acli(
            "run", str(graph), "--input", "task=list", "--json", "--quiet", *store, env=env
        )
        assert ran.returncode == 3, ran.stderr  # waiting: at the budget gate
        run_id = json.loads(ran.stdout)["run_id"]

        shown = await _acli("status", run_id, *store, env=env)
        assert shown.returncode == 0, shown.stderr
        # Three answers of 1,500 tokens each (0.007 each) settled; the fourth call's
        # 1,500 and more would not fit in what is left.
        assert "budget: 4500 tokens spent, 500 left of 5000; 0.021 money spent" in shown.stdout
        assert f"{run_id}:budget" in shown.stdout
        history = (await _acli("history", run_id, *store, env=env)).stdout
        reserved = [line for line in history.splitlines() if " reserve " in line]
        assert len(reserved) == 3  # one per call sent, before it was sent
        assert all("for a model call in think" in line for line in reserved), reserved
        view = json.loads((await _acli("status", run_id, "--json", *store, env=env)).stdout)
        assert view["budget"]["limit"] == {"tokens": 5000, "money": None}
        assert view["budget"]["spent"] == {"tokens": 4500, "money": 0.021}
        assert view["budget"]["left"]["tokens"] == 500
        assert view["nodes"]["agent"]["counters"]["money"] == 21_000
        [gate] = view["interrupts"]
        assert gate["kind"] == "budget"
        assert gate["answers"] == ["more", "stop"]

        refused = await _acli(
            "reply", run_id, "--id", gate["id"], "--trigger", "more", *store, env=env
        )
        assert refused.returncode == 2
        assert "more needs what to add" in refused.stderr

        more = ["--trigger", "more", "--payload", "tokens=20000"]
        replied = await _acli(
            "reply", run_id, "--id", gate["id"], *more, "--json", "--quiet", *store, env=env
        )
        assert replied.returncode == 0, replied.stderr
        view = json.loads((await _acli("status", run_id, "--json", *store, env=env)).stdout)
        assert view["status"] == "completed"
        assert view["budget"]["limit"]["tokens"] == 25_000
        assert view["budget"]["spent"]["tokens"] == 7 * 1500
    finally:
        await server.aclose()


def test_a_bad_budget_is_one_clear_error_naming_its_line(tmp_path: Path) -> None:
    graph = _graph(tmp_path, {"tokens": 0, "prices": {"main": {"input": -1, "output": 1}}})
    done = _cli("check", str(graph))
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "budget" in line]
    assert any(re.match(r".*agent\.yaml:\d+:\d+: error: .*tokens", line) for line in lines), lines
    assert any(re.match(r".*agent\.yaml:\d+:\d+: error: .*input", line) for line in lines), lines


def test_phasegraph_test_proves_crash_equivalence_of_a_budgeted_graph(tmp_path: Path) -> None:
    # The graph of docs/budgets.md, offline: a crash charges its call at its most, so the
    # kit compares the actions without the run's budget (the spend is not the actions').
    page = (Path(__file__).parents[2] / "docs" / "budgets.md").read_text(encoding="utf-8")
    for name in ("answers.json", "budgeted.yaml"):
        found = re.search(rf"<!-- file: {re.escape(name)} -->\n```\w*\n(.*?)```", page, re.S)
        assert found
        (tmp_path / name).write_text(found[1], encoding="utf-8")
    done = subprocess.run(
        cli_argv("test", "budgeted.yaml", "--input", "task=x"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      crash-equivalence" in done.stdout
