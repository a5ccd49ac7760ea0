"""The command line's ``--json`` and the HTTP API give the same JSON for the same run.

Runs are made by the real ``phasegraph`` command in a subprocess; the server reads the
same SQLite store over a real socket. ``status RUN``, ``show``, ``history``, ``errors``
and the run list are compared with the routes that serve the same shapes, and every
timestamp either prints is ISO 8601 in UTC.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_server import FIXTURES, serving, settings_for

from builders import REPO, cli_argv
from history_checks import is_iso_utc
from phasegraph import Engine, open_store

GATE = REPO / ".ci" / "fuzz-gate.yaml"
TIME_FIELDS = frozenset({"time", "created_at", "updated_at", "deadline"})


def _cli(store: str, *args: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        cli_argv(*args, "--store", store, "--json"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode in (0, 1, 3), done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with a completed run (``done``), one waiting at a gate (``waiting``) and
    one whose plan made children (``planned``: its records and state hold the plan)."""
    tmp = tmp_path_factory.mktemp("shapes")
    url = f"sqlite:///{tmp / 'runs.db'}"
    shutil.copy(GATE, tmp / "gate.yaml")
    _cli(url, "run", "hello", "--run-id", "done", "-q")
    _cli(url, "run", str(tmp / "gate.yaml"), "--run-id", "waiting", "-q")
    env = {**os.environ, "PYTHONPATH": str(FIXTURES)}  # the planned graph's actions
    _cli(url, "run", str(FIXTURES / "planned.yaml"), "--run-id", "planned", "-q", env=env)
    plan = 'plan=[{"id": "a"}, {"id": "b", "needs": ["a"]}]'
    reply = ["reply", "planned", "--id", "planned:phases:plan", "--trigger", "planned"]
    _cli(url, *reply, "--data", plan, "-q", env=env)
    return url


async def _http(store: str, tmp_path: Path, paths: list[str]) -> list[Any]:
    async with (
        open_store(store) as opened,
        serving(Engine(opened), settings_for(tmp_path)) as client,
    ):
        bodies = []
        for path in paths:
            async with client.get(path) as response:
                assert response.status == 200, await response.text()
                bodies.append(await response.json())
        return bodies


@pytest.mark.parametrize("run_id", ["done", "waiting", "planned"])
async def test_cli_json_and_http_give_the_same_run(store: str, tmp_path: Path, run_id: str) -> None:
    base = f"/runs/{run_id}"
    paths = [base, f"{base}/snapshot", f"{base}/history?limit=1000", f"{base}/errors"]
    run, snapshot, history, errors = await _http(store, tmp_path, paths)
    assert _cli(store, "status", run_id) == run
    assert _cli(store, "show", run_id) == snapshot
    assert _cli(store, "history", run_id) == history["records"]
    assert history["next_start"] is None
    assert _cli(store, "errors", run_id) == errors
    if run_id == "waiting":  # the gate's answers are shown on both sides
        (interrupt,) = run["interrupts"]
        assert interrupt["answers"] == ["ok", "fail"]
    if run_id == "planned":  # the plan, its children and their results, on both sides
        assert run["status"] == "completed"
        assert snapshot["plans"]["phases"]["members"] == ["a", "b"]
        assert snapshot["nodes"]["phases.b"]["result"] == "b done"
        assert [r["plan"]["version"] for r in history["records"] if r["plan"]] == [1]


async def test_cli_json_and_http_list_the_same_runs(store: str, tmp_path: Path) -> None:
    (page,) = await _http(store, tmp_path, ["/runs"])
    listed = _cli(store, "status")
    assert listed == page["runs"]
    assert {run["run_id"] for run in listed} == {"done", "waiting", "planned"}


def _times(value: Any) -> Iterator[Any]:
    """Every value of a timestamp field anywhere in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TIME_FIELDS and item is not None:
                yield item
            else:
                yield from _times(item)
    elif isinstance(value, list):
        for item in value:
            yield from _times(item)


def test_every_timestamp_is_iso_in_utc(store: str) -> None:
    outputs = [
        _cli(store, "status"),
        *(
            _cli(store, command, run_id)
            for run_id in ("done", "waiting")
            for command in ("status", "show", "history", "errors")
        ),
    ]
    times = [time for output in outputs for time in _times(output)]
    assert len(times) > 20
    assert all(is_iso_utc(time) for time in times), times
    # The interrupt's deadline and creation, the list's times, each record's time.
    assert {"deadline", "created_at"} <= set(
        _cli(store, "show", "waiting")["interrupts"]["waiting:gate:run"]
    )
