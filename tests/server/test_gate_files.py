"""A gate's payload names files: ``GET /runs/{run_id}/gates/{gate_id}/files`` reads them.

The real ``phasegraph run`` starts a run from a graph file in a folder of its own and
waits at its gate; the real ``phasegraph serve``, started in that folder, reads what the
gate names there, over a real socket. The browser side is in ``test_viewer_browser.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from builders import cli_argv

TOKEN = "files-token"
NOTES = "- one <script>alert(1)</script>\n- two & three\n"
GRAPH = """
graph: review_notes
nodes:
  - id: write
    machine: task
    bind:
      run: {shell: [python3, make_notes.py], on_exit: {0: ok, default: fail}}
  - id: review
    machine: task
    needs: [write]
    bind:
      run:
        human: review
        triggers: [ok, fail]
        payload:
          notes: notes.md
          big: big.md
          hidden: .env
          up: ../outside.md
          absolute: ABSOLUTE
          missing: nothing.md
          binary: data.bin
          count: 3
"""
MAKE_NOTES = f"""
from pathlib import Path
Path("notes.md").write_text({NOTES!r}, encoding="utf-8")
Path("big.md").write_text("x" * 70000, encoding="utf-8")
Path(".env").write_text("KEY=secret", encoding="utf-8")
Path("data.bin").write_bytes(bytes(range(8)))
"""


@dataclass
class Gated:
    """A server started in the run's folder, and the run's open gate."""

    url: str
    run_id: str
    gate: str

    def get(self, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


def gated_folder(folder: Path) -> str:
    """Write the graph and its script in ``folder``; start its run there (it waits)."""
    (folder.parent / "outside.md").write_text("outside", encoding="utf-8")
    (folder / "make_notes.py").write_text(MAKE_NOTES, encoding="utf-8")
    graph = GRAPH.replace("ABSOLUTE", str(folder.parent / "outside.md"))
    (folder / "review.yaml").write_text(graph, encoding="utf-8")
    store = f"sqlite:///{folder / 'runs.db'}"
    started = subprocess.run(
        cli_argv("run", "review.yaml", "--store", store, "--run-id", "notes", "-q"),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 3, started.stdout + started.stderr  # waiting at the gate
    return store


@contextmanager
def serve_in(folder: Path, store: str, *options: str) -> Iterator[str]:
    """``phasegraph serve`` started in ``folder`` (with ``options``): its URL."""
    argv = cli_argv("serve", "--port", "0", "--token", TOKEN, "--store", store, *options)
    with subprocess.Popen(
        argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"http://\S+", line)
        assert match, f"serve printed {line!r}"
        try:
            yield match[0]
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gated]:
    folder = tmp_path_factory.mktemp("gate-files") / "work"
    folder.mkdir()
    store = gated_folder(folder)
    with serve_in(folder, store) as url:
        client = Gated(url, "notes", "")
        status, run = client.get("/runs/notes")
        assert status == 200, run
        (gate,) = run["interrupts"]
        client.gate = gate["id"]
        yield client


def test_the_files_a_gate_names_are_read_from_the_runs_folder(gated: Gated) -> None:
    status, found = gated.get(f"/runs/notes/gates/{gated.gate}/files")
    assert status == 200, found
    files = {file["key"]: file for file in found["files"]}
    assert files["notes"] == {
        "key": "notes",
        "path": "notes.md",
        "text": NOTES,
        "bytes": len(NOTES.encode()),
        "truncated": False,
    }
    # A long file is cut at 64 KiB, and says so.
    assert files["big"]["bytes"] == 70000
    assert files["big"]["truncated"] is True
    assert len(files["big"]["text"]) == 64 * 1024
    # Hidden, outside, absolute, missing, binary and non-string values: not shown.
    assert set(files) == {"notes", "big"}


def test_a_gate_that_is_not_open_names_no_file(gated: Gated) -> None:
    status, problem = gated.get("/runs/notes/gates/no-such-gate/files")
    assert status == 409
    assert "no open gate 'no-such-gate'" in problem["detail"]
    status, _ = gated.get("/runs/nobody/gates/x/files")
    assert status == 404


def test_a_run_of_an_uploaded_graph_names_no_file(gated: Gated, tmp_path: Path) -> None:
    body = json.dumps(
        {
            "graph_yaml": (
                "graph: up\nnodes:\n  - id: g\n    machine: task\n    bind:\n"
                "      run: {human: review, payload: {f: review.yaml}, triggers: [ok]}\n"
            )
        }
    ).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(gated.url + "/runs", body, headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        run = json.loads(response.read())
    for _ in range(3000):  # a guard for a stuck run, not a speed limit
        status, run = gated.get(f"/runs/{run['run_id']}")
        if run["interrupts"]:
            break
        time.sleep(0.01)
    (gate,) = run["interrupts"]
    status, found = gated.get(f"/runs/{run['run_id']}/gates/{gate['id']}/files")
    assert status == 200
    assert found["files"] == []
