"""``phasegraph serve --read-only``: a server to look at runs with, which drives none.

The real command in a subprocess, over a real socket, beside runs another process
started: it must not become their second driver (resume them at start, answer, cancel).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from test_gate_files import TOKEN, serve_in

from builders import cli_argv

READ_ONLY = "this server only reads runs (serve --read-only)"


def _call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _cli(folder: Path, *args: str) -> str:
    done = subprocess.run(
        cli_argv(*args), cwd=folder, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


def test_a_read_only_server_drives_nothing_and_says_why_it_refuses(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    _cli(tmp_path, "run", "hello", "--input", "who=x", "--store", store, "--run-id", "done", "-q")
    # A run left `running` at its first step: a plain server would take it over at start.
    left = _cli(tmp_path, "fork", "done", "--at", "2", "--no-run", "--store", store).split()[0]
    with serve_in(tmp_path, store, "--read-only") as url:
        assert _call(url, "GET", "/readyz")[0] == 200  # start-up recovery is over
        status, run = _call(url, "GET", f"/runs/{left}")
        assert status == 200
        assert (run["status"], run["seq"], run["driving"]) == ("running", 0, False)
        # Whatever would drive, start, answer or change a run is refused, saying why.
        for method, path, body in [
            ("POST", "/runs", {"graph": "hello", "input": {"who": "y"}}),
            ("POST", f"/runs/{left}/resume", {}),
            ("POST", f"/runs/{left}/cancel", {}),
            ("POST", f"/runs/{left}/reply", {"interrupt_id": "x", "trigger": "ok"}),
            ("POST", "/runs/done/fork", {"at_seq": 1}),
        ]:
            status, problem = _call(url, method, path, body)
            assert status == 403, (path, problem)
            assert READ_ONLY in problem["detail"]
        # Reading works, and the viewer is told this token may only read.
        assert _call(url, "GET", "/runs/done/history")[0] == 200
        assert _call(url, "POST", "/runs/done/replay")[1]["identical"] is True
        assert _call(url, "GET", "/whoami")[1]["scopes"] == ["runs:read"]
        assert _call(url, "GET", f"/runs/{left}")[1]["seq"] == 0
