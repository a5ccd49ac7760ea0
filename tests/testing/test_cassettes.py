"""Cassettes through the command line: a recorded coding_task run kept as a test, offline.

The run is made once, against ``phasegraph model-server`` (the scripted model over HTTP)
in a subprocess; ``record`` writes its cassette; ``test`` drives copies of the graph
against it after the model server has stopped, from a folder without the graph's
response script, so every model answer can only come from the cassette.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders import cli_argv

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
SECRET = "sk-cassette-secret-4242"
"""A key in the recording's environment: it must never reach a cassette."""


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_LLM", "OPENAI"))
    }
    return subprocess.run(
        cli_argv(*args), cwd=cwd, env={**environ, **(env or {})},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@contextmanager
def _model_server(script: Path) -> Iterator[str]:
    """``phasegraph model-server`` answering ``script`` in a subprocess: its base URL."""
    server = subprocess.Popen(
        cli_argv("model-server", "--script", str(script)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with server:
        try:
            assert server.stdout is not None
            yield server.stdout.readline().strip()
        finally:
            server.send_signal(signal.SIGINT)
            server.communicate(timeout=60)


@dataclass(frozen=True)
class Recorded:
    folder: Path
    store: str
    cassette: Path

    def graph(self, name: str, *changes: tuple[str, str]) -> Path:
        """A copy of coding_task.yaml with ``changes`` made (no response script beside it)."""
        text = (GRAPHS / "coding_task.yaml").read_text(encoding="utf-8")
        for old, new in changes:
            assert old in text
            text = text.replace(old, new)
        path = self.folder / "graphs" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def test(self, graph: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
        return _cli("test", str(graph), *args, cwd=self.folder)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    folder = tmp_path_factory.mktemp("cassettes")
    store = f"sqlite:///{folder / 'runs.db'}"
    with _model_server(GRAPHS / "coding_task.responses.json") as base_url:
        env = {"PHASEGRAPH_LLM_BASE_URL": base_url, "PHASEGRAPH_LLM_API_KEY": SECRET}
        work = folder / "work"
        work.mkdir()
        args = ["--store", store, "--run-id", "rec", "--input", f"workdir={work}", "-q"]
        done = _cli("run", "coding_task", "--approve", *args, cwd=folder, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    cassette = folder / "coding.cassette.yaml"
    written = _cli("record", "rec", "--store", store, "--out", str(cassette), cwd=folder,
                   env={"PHASEGRAPH_LLM_API_KEY": SECRET})  # fmt: skip
    assert written.returncode == 0, written.stdout + written.stderr
    assert f"recorded run rec to {cassette}" in written.stdout
    return Recorded(folder, store, cassette)


def _entries(path: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))["entries"]
    return entries


def test_the_cassette_holds_the_run_in_order_keyed_by_node_hook_and_turn(
    recorded: Recorded,
) -> None:
    document = yaml.safe_load(recorded.cassette.read_text(encoding="utf-8"))
    assert (document["cassette"], document["graph"], document["run"]) == (1, "coding_task", "rec")
    entries = document["entries"]
    assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
    # Every scripted answer is there, as the model said it, by node, hook and turn.
    script = json.loads((GRAPHS / "coding_task.responses.json").read_text(encoding="utf-8"))
    answers = [e for e in entries if e["kind"] == "llm"]
    assert len(answers) == len(script)
    assert [(e["node"], e["hook"]) for e in answers].count(("build", "reflect")) == 1
    assert answers[0]["answer"]["message"]["content"] == script[0]["content"]
    assert answers[0]["request"]["digest"].startswith("sha256:")
    assert answers[0]["request"]["prompt"].startswith("Implement calc.total")
    tools = [(e["request"]["tool"], e["call"]) for e in entries if e["kind"] == "tool"]
    assert tools[:3] == [("list_files", 0), ("read_file", 0), ("read_file", 1)]
    replies = [e for e in entries if e["kind"] == "reply"]
    assert [(e["node"], e["answer"]["trigger"]) for e in replies] == [("spec", "confirm")]
    # The model key of the recording's environment is nowhere in the file.
    assert SECRET not in recorded.cassette.read_text(encoding="utf-8")


def test_the_recorded_run_passes_offline_from_the_run(recorded: Recorded) -> None:
    # (From the file it passes too: the pytest plugin's test below plays the file.)
    graph = recorded.graph("coding_task.yaml")  # no response script beside it
    done = recorded.test(graph, "--from-run", "rec", "--store", recorded.store, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    total = len(_entries(recorded.cassette))
    assert (report["entries"], report["recorded"]) == (total, total)
    assert (report["passed"], report["status"], report["changed"]) == (True, "completed", [])
    assert report["graph_changed"] is False  # the same definition, from another folder


def test_a_changed_prompt_is_reported_as_changed_and_still_passes(recorded: Recorded) -> None:
    graph = recorded.graph(
        "reflect.yaml", ("Reflect: what is the cause?", "Reflect carefully: what is the cause?")
    )
    done = recorded.test(graph, "--cassette", str(recorded.cassette))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "against graph 'coding_task' (changed since the recording): passed" in done.stdout
    reflect = next(e for e in _entries(recorded.cassette) if e["hook"] == "reflect")
    assert f"changed request at step {reflect['at']} (node 'build', hook 'reflect', turn 1)" in (
        done.stdout
    )
    assert "the prompt changed" in done.stdout
    assert "Reflect carefully" in done.stdout
    # The later requests only carry it (the conversation holds the changed prompt).
    later = [e["at"] for e in _entries(recorded.cassette) if e["kind"] == "llm"]
    later = [at for at in later if at > reflect["at"]]
    assert (
        f"{len(later)} later request(s) only carry those changes "
        f"(steps {', '.join(map(str, later))})"
    ) in done.stdout


def test_a_tool_that_now_returns_something_else_fails_at_that_step(recorded: Recorded) -> None:
    module = recorded.folder / "graphs" / "other_repo.py"
    module.parent.mkdir(exist_ok=True)
    module.write_text(
        "from pathlib import Path\n"
        "from phasegraph.graphs.coding_task import create_repository\n\n\n"
        "async def create(ctx):\n"
        "    result = await create_repository(ctx)\n"
        "    calc = Path(result.data['repo']) / 'calc.py'\n"
        "    calc.write_text(calc.read_text() + '# changed\\n')\n"
        "    return result\n",
        encoding="utf-8",
    )
    graph = recorded.graph(
        "tool.yaml", ("phasegraph.graphs.coding_task:create_repository", "other_repo:create")
    )
    done = recorded.test(graph, "--cassette", str(recorded.cassette))
    assert done.returncode == 1, done.stdout + done.stderr
    calc = {"tool": "read_file", "arguments": {"path": "calc.py"}}
    read = next(e for e in _entries(recorded.cassette) if e.get("request") == calc)
    where = (
        f"FAILED at step {read['at']} (node 'build', hook 'act', turn {read['turn']}, tool call 0)"
    )
    assert where in done.stdout
    assert "tool 'read_file' now returns something else" in done.stdout
    assert "# changed" in done.stdout  # what it returns now, beside what it returned then


def test_a_request_the_cassette_cannot_answer_fails_naming_it(recorded: Recorded) -> None:
    document = yaml.safe_load(recorded.cassette.read_text(encoding="utf-8"))
    last = max(i for i, e in enumerate(document["entries"]) if e["kind"] == "llm")
    gone = document["entries"].pop(last)
    short = recorded.folder / "short.cassette.yaml"
    short.write_text(yaml.safe_dump(document), encoding="utf-8")
    done = recorded.test("coding_task", "--cassette", str(short))
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"the cassette has no answer for node 'build', hook 'think', turn {gone['turn']} "
        "(a model call)"
    ) in done.stdout


def test_bad_input_gets_one_clear_error(recorded: Recorded) -> None:
    cases = {
        ("coding_task", "--from-run", "nope", "--store", recorded.store): "no run 'nope'",
        ("coding_task", "--cassette", "missing.yaml"): "cannot read the cassette 'missing.yaml'",
        ("hello", "--cassette", str(recorded.cassette)): (
            "was recorded from graph 'coding_task', not 'hello'"
        ),
        ("coding_task", "--update"): "--update re-records a cassette",
    }
    for args, message in cases.items():
        done = recorded.test(*args)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert message in done.stderr
        assert "Traceback" not in done.stderr
    bad = recorded.folder / "bad.cassette.yaml"
    text = recorded.cassette.read_text(encoding="utf-8")
    bad.write_text(text.replace("\n  turn: 1\n", "\n  turn: one\n", 1), encoding="utf-8")
    line = bad.read_text(encoding="utf-8").splitlines().index("  turn: one") + 1
    done = recorded.test("coding_task", "--cassette", str(bad))
    assert done.returncode == 2
    assert f"{bad}:{line}:3: entry 0: `turn` must be int" in done.stderr
    missing = _cli(
        "record", "nope", "--store", recorded.store, "--out", "x.yaml", cwd=recorded.folder
    )
    assert missing.returncode == 2
    assert "no run 'nope'" in missing.stderr


def test_the_pytest_plugin_runs_each_cassette_as_a_test(recorded: Recorded) -> None:
    suite = recorded.folder / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        'pytest_plugins = ["phasegraph.testing.cassettes.plugin"]\n', encoding="utf-8"
    )
    shutil.copy(recorded.cassette, suite / "good.cassette.yaml")
    document = yaml.safe_load(recorded.cassette.read_text(encoding="utf-8"))
    tool = next(e for e in document["entries"] if e["kind"] == "tool")
    tool["answer"]["result"] = {"files": ["elsewhere.py"], "path": "."}
    (suite / "stale.cassette.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=suite, capture_output=True, text=True, timeout=300, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "stale.cassette.yaml" in done.stdout
    assert "tool 'list_files' now returns something else" in done.stdout


def test_update_records_again_from_a_live_endpoint(recorded: Recorded) -> None:
    graph = recorded.graph(
        "updated.yaml", ("Reflect: what is the cause?", "Reflect briefly: what is the cause?")
    )
    cassette = recorded.folder / "updated.cassette.yaml"
    shutil.copy(recorded.cassette, cassette)
    with _model_server(GRAPHS / "coding_task.responses.json") as base_url:
        done = _cli("test", str(graph), "--cassette", str(cassette), "--update",
                    cwd=recorded.folder, env={"PHASEGRAPH_LLM_BASE_URL": base_url})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"re-recorded {cassette}" in done.stdout
    assert "from a live run (completed)" in done.stdout
    reflect = next(e for e in _entries(cassette) if e["hook"] == "reflect")
    assert "Reflect briefly" in reflect["request"]["prompt"]
    again = recorded.test(graph, "--cassette", str(cassette), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["changed"] == []


def test_a_run_recorded_waiting_at_a_gate_passes_waiting_there(recorded: Recorded) -> None:
    work = recorded.folder / "waiting"
    work.mkdir()
    args = ["--store", recorded.store, "--run-id", "waits", "-q", "--input", f"workdir={work}"]
    waiting = _cli("run", "coding_task", *args, cwd=recorded.folder)
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr  # 3: waits for a person
    done = recorded.test("coding_task", "--from-run", "waits", "--store", recorded.store, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["passed"], report["status"], report["entries"]) == (True, "waiting", 3)


def test_a_model_call_that_failed_fails_again_the_same_way(recorded: Recorded) -> None:
    script = recorded.folder / "gone.json"
    script.write_text(json.dumps([{"error": 400, "message": "the model is gone"}]), "utf-8")
    work = recorded.folder / "gone"
    work.mkdir()
    args = ["--store", recorded.store, "--run-id", "gone", "-q", "--input", f"workdir={work}"]
    with _model_server(script) as base_url:
        ran = _cli("run", "coding_task", "--approve", *args, cwd=recorded.folder,
                   env={"PHASEGRAPH_LLM_BASE_URL": base_url})  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr  # the build node failed
    done = recorded.test("coding_task", "--from-run", "gone", "--store", recorded.store, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["passed"], report["status"]) == (True, "failed")
