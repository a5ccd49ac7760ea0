"""``phasegraph history --json``: the JSON ``Engine.history_json`` renders, as it is."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

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
