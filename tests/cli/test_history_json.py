"""``phasegraph history --json``: the JSON ``Engine.history_json`` renders, as it is."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from builders import cli_argv
from history_checks import assert_holds
from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.store import open_store


def _api_json(store: str, run_id: str, start: int = 0, stop: int | None = None) -> bytes:
    async def read() -> bytes:
        async with open_store(store) as opened:
            engine = Engine(opened)
            text = await engine.history_json(run_id, start=start, stop=stop)
            assert_holds(text, await engine.history(run_id, start=start, stop=stop))
            return text

    return asyncio.run(read())


def test_history_json_prints_each_window_of_the_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["run", "hello", "--store", store, "--run-id", "r", "-q", "--input", "who=x"]) == 0
    capsys.readouterr()
    for window in ([], ["--from", "2"], ["--from", "1", "--to", "3"], ["--from", "3", "--to", "1"]):
        assert main(["history", "r", "--json", "--store", store, *window]) == 0
        out = capsys.readouterr().out
        start = int(window[1]) if window else 0
        stop = int(window[3]) if len(window) > 2 else None
        assert out.encode() == _api_json(store, "r", start, stop) + b"\n"
    assert out == "[]\n"  # --from 3 --to 1: no record
    assert len(json.loads(_api_json(store, "r"))) > 3


def test_history_json_to_a_text_only_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["run", "hello", "--store", store, "--run-id", "r", "-q", "--input", "who=x"]) == 0
    text = io.StringIO()  # no byte stream behind it
    monkeypatch.setattr("sys.stdout", text)
    assert main(["history", "r", "--json", "--store", store]) == 0
    assert text.getvalue().encode() == _api_json(store, "r") + b"\n"


def test_history_json_carries_each_turns_prompt_as_sent(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGRAPH_LLM", "OPENAI"))}
    common = ["--store", store, "--run-id", "c", "--input", f"workdir={tmp_path}"]
    started = subprocess.run(
        cli_argv("run", "coding_task", "--approve", "-q", *common),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    shown = subprocess.run(
        cli_argv("history", "c", "--json", "--store", store),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    turns = [
        r["result"]["output"]
        for r in json.loads(shown.stdout)
        if r["node"] == "build" and "finish_reason" in r["result"].get("output", {})
    ]
    # `think` has a system message, sent (and recorded) with each of its turns.
    thinking = [t for t in turns if "system" in t]
    assert len(thinking) > 2
    assert all("careful software engineer" in t["system"] for t in thinking)
    # The first turn's prompt is the `{spec}` template, rendered from the run's data.
    assert "Implement calc.total" in turns[0]["prompt"]
    # `reflect` has none: its prompt says what failed, with the check's message filled in.
    [reflected] = [t["prompt"] for t in turns if "system" not in t]
    assert reflected.startswith("The tests failed: ")
    assert "{payload" not in reflected
