"""``phasegraph history --json``: the text ``to_json`` of the record views gave, byte for byte."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.codec import _json
from phasegraph.store import open_store
from phasegraph.views import record_view


def _expected(store: str, run_id: str, start: int = 0, stop: int | None = None) -> str:
    async def read() -> str:
        async with open_store(store) as opened:
            records = await Engine(opened).history(run_id, start=start, stop=stop)
        return _json.to_json([record_view(record) for record in records]) + "\n"

    return asyncio.run(read())


def test_history_json_prints_what_the_record_views_gave(
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
        assert out == _expected(store, "r", start, stop)
    assert len(json.loads(_expected(store, "r"))) > 3


def test_history_json_to_a_text_only_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["run", "hello", "--store", store, "--run-id", "r", "-q", "--input", "who=x"]) == 0
    text = io.StringIO()  # no byte stream behind it
    monkeypatch.setattr("sys.stdout", text)
    assert main(["history", "r", "--json", "--store", store]) == 0
    assert text.getvalue() == _expected(store, "r")
