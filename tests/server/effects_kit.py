"""A real ``phasegraph serve`` holding runs parked on an ``outcome_unknown`` gate.

An agent's ``act`` step makes :data:`CALLS` ``run_command`` calls (``once`` effects), each
appending its effect id (``PHASEGRAPH_EFFECT_ID``) to a file: the file counts the
effects. ``tests/fixtures/effects/drive.py`` runs the graph against the server's SQLite
store and SIGKILLs itself at a point of call 1's timeline found in the records it commits
(never by timing); ``POST /runs/ID/resume`` then has the server drive the run, which parks
on the gate. A second graph's ``once`` shell action makes its effect, then (the first time)
kills the ``phasegraph run`` that runs it: the action's own effect is left uncertain. The
model is ``phasegraph model-server`` answering by turn (tool calls, then "all done"), so
every run of the module shares it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders import TESTS, cli_argv
from model_kit import ENDPOINT_VARIABLES, agent_node, call, graph_text

TOKEN = "effects-token"
CALLS = 2
DRIVE = TESTS / "fixtures" / "effects" / "drive.py"
# Appends the call's effect id to the file named by its argument: one line per effect.
COUNT = (
    "import os, sys\n"
    "with open(sys.argv[1], 'a') as f: f.write(os.environ['PHASEGRAPH_EFFECT_ID'] + '\\n')\n"
    "print('counted')"
)


@contextmanager
def printing_url(argv: list[str], env: Mapping[str, str]) -> Iterator[str]:
    """Start a command that prints its URL on its first line; stop it on leaving."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env)
    ) as process:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"http://\S+", line)
        if not match:
            process.kill()
            err = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"{argv[1:3]} printed {line!r}; stderr: {err}")
        try:
            yield match[0]
        finally:
            process.terminate()
            process.wait(timeout=30)


@dataclass
class EffectsServer:
    """The server under test, the store it shares with the killed drivers, the effects."""

    url: str
    store: str
    graph: Path
    action_graph: Path
    effects_file: Path
    env: Mapping[str, str]

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The answer's status and JSON body (an error status is returned, not raised)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, body
        return body

    def wait_for(self, run_id: str, status: str) -> dict[str, Any]:
        # Polls the server; the bound is a failure guard for a stuck run, not a speed limit.
        for _ in range(12_000):
            view: dict[str, Any] = self.get(f"/runs/{run_id}")
            if view["status"] == status:
                return view
            time.sleep(0.01)
        raise AssertionError(f"run {run_id} never reached {status}")

    def history(self, run_id: str) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self.get(f"/runs/{run_id}/history?limit=1000")["records"]
        return records

    def effects(self) -> Counter[str]:
        """How many times each effect id's effect happened, in every run so far."""
        if not self.effects_file.exists():
            return Counter()
        return Counter(self.effects_file.read_text(encoding="utf-8").split())

    def park(self, run_id: str, point: str, graph: Path | None = None) -> dict[str, Any]:
        """Kill a run at ``point`` of call 1's timeline, then have the server resume it.

        Returns the open ``outcome_unknown`` gate (the run's only interrupt).
        """
        path = str(graph or self.graph)
        argv = [sys.executable, str(DRIVE), self.store, path, run_id, "{}", point]
        return self._resumed(run_id, argv)

    def park_action(self, run_id: str) -> dict[str, Any]:
        """Run the ``once`` shell action, killed after its effect; the server resumes it."""
        argv = cli_argv("run", str(self.action_graph), "--run-id", run_id, "--store", self.store)
        return self._resumed(run_id, argv)

    def _resumed(self, run_id: str, killed_argv: list[str]) -> dict[str, Any]:
        killed = subprocess.run(
            killed_argv, env=dict(self.env), capture_output=True, text=True, timeout=300
        )
        assert killed.returncode == -9, killed.stderr
        status, body = self.call("POST", f"/runs/{run_id}/resume", {})
        assert status in (200, 202), body
        view = self.wait_for(run_id, "waiting")
        [gate] = view["interrupts"]
        assert gate["kind"] == "outcome_unknown"
        return dict(gate)


def effect_id(run_id: str, index: int) -> str:
    """The effect id of call ``index`` of the agent's first ``act`` step."""
    return f"{run_id}:agent:1:{index}"


def _graph(folder: Path) -> Path:
    node = agent_node(
        {"prompt": "go", "tools": ["run_command"]}, settings={"workspace": str(folder)}
    )
    path = folder / "effects.yaml"
    path.write_text(graph_text(node), encoding="utf-8")
    return path


def _action_graph(folder: Path, effects_file: Path) -> Path:
    """A ``once`` shell action whose first attempt kills its runner after the effect."""
    flag = f"{folder}/crashed-$PHASEGRAPH_EFFECT_ID"
    command = (
        f'echo "$PHASEGRAPH_EFFECT_ID" >> {effects_file}; '
        f'if [ ! -e "{flag}" ]; then touch "{flag}"; kill -9 $PPID; fi'
    )
    run = {"shell": ["sh", "-c", command], "effect": "once", "cwd": str(folder)}
    node = {"id": "pay", "machine": "task", "bind": {"run": run}}
    path = folder / "pay.yaml"
    path.write_text(json.dumps({"graph": "pay_once", "nodes": [node]}), encoding="utf-8")
    return path


def _script(folder: Path, effects_file: Path) -> Path:
    argv = [sys.executable, "-S", "-c", COUNT, str(effects_file)]  # -S: a quicker start
    calls = [call("run_command", argv=argv) for _ in range(CALLS)]
    path = folder / "script.json"
    path.write_text(json.dumps([{"tool_calls": calls}, {"content": "all done"}]), "utf-8")
    return path


@contextmanager
def effects_server(folder: Path) -> Iterator[EffectsServer]:
    """A model server and ``phasegraph serve`` on a SQLite store in ``folder``."""
    effects_file = folder / "effects.txt"
    env = {k: v for k, v in os.environ.items() if k not in ENDPOINT_VARIABLES}
    script = _script(folder, effects_file)
    with printing_url(cli_argv("model-server", "--script", str(script)), env) as model:
        env["PHASEGRAPH_LLM_BASE_URL"] = model
        store = f"sqlite:///{folder / 'runs.db'}"
        argv = cli_argv(
            "serve", "--port", "0", "--token", TOKEN, "--store", store,
            "--upload-dir", str(folder / "uploads"),
        )  # fmt: skip
        with printing_url(argv, env) as url:
            graphs = _graph(folder), _action_graph(folder, effects_file)
            yield EffectsServer(url, store, *graphs, effects_file, env)
