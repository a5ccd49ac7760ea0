"""``phasegraph model-server``: a response script served over HTTP, called by real clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from builders import cli_argv

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
SCRIPT = [
    {"content": "the first answer"},
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
    {"content": "the notes say 42", "model": "small"},
    {"error": 429, "message": "slow down", "retry_after": 1},
]


@contextmanager
def _model_server(script: Path, *extra: str) -> Iterator[str]:
    """Start ``phasegraph model-server`` in a subprocess; yield the base URL it printed."""
    process = subprocess.Popen(
        cli_argv("model-server", "--script", str(script), *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with process:  # closes the pipes
        try:
            assert process.stdout is not None
            yield process.stdout.readline().strip()
            process.send_signal(signal.SIGINT)
            _, said = process.communicate(timeout=60)
            assert process.returncode == 0, said  # Ctrl-C stops it cleanly
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return path


def test_it_prints_its_base_url_and_answers_by_turn(script: Path) -> None:
    with _model_server(script) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        client = _client(base_url)
        asked = [{"role": "user", "content": "hello"}]
        first = client.chat.completions.create(model="big", messages=asked)
        assert first.choices[0].message.content == "the first answer"
        # Asked again for the same turn: the same answer (a resumed run repeats a request).
        again = client.chat.completions.create(model="big", messages=asked)
        assert again.choices[0].message.content == "the first answer"
        answered = [*asked, {"role": "assistant", "content": "the first answer"}]
        second = client.chat.completions.create(model="big", messages=answered)
        (call,) = second.choices[0].message.tool_calls or []
        assert call.function.name == "read_file"
        assert json.loads(call.function.arguments) == {"path": "notes.txt"}
        # An entry naming a model answers only that model's requests; others skip it.
        twice = [*answered, {"role": "user", "content": "and?"}, second.choices[0].message]
        small = client.chat.completions.create(model="small", messages=twice)
        assert small.choices[0].message.content == "the notes say 42"
        with pytest.raises(openai.RateLimitError, match="slow down"):
            client.chat.completions.create(model="big", messages=twice)
        # Streamed, the same answer arrives in pieces.
        pieces = client.chat.completions.create(model="big", messages=asked, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices) == (
            "the first answer"
        )


def test_in_order_takes_the_next_entry_and_says_when_none_is_left(script: Path) -> None:
    with _model_server(script, "--in-order") as base_url:
        client = _client(base_url)
        asked = [{"role": "user", "content": "hello"}]
        first = client.chat.completions.create(model="big", messages=asked)
        assert first.choices[0].message.content == "the first answer"
        second = client.chat.completions.create(model="big", messages=asked)
        assert second.choices[0].message.tool_calls
        with pytest.raises(openai.RateLimitError, match="slow down") as limited:
            client.chat.completions.create(model="big", messages=asked)
        assert limited.value.response.headers["Retry-After"] == "1"
        with pytest.raises(openai.BadRequestError, match="the script has no answer"):
            client.chat.completions.create(model="big", messages=asked)


def test_a_graph_runs_against_it(tmp_path: Path) -> None:
    """The research example, its model the command's server instead of its own script."""
    with _model_server(GRAPHS / "research_agent.responses.json") as base_url:
        done = subprocess.run(
            cli_argv("run", "research_agent", "--store", f"sqlite:///{tmp_path / 'runs.db'}",
                     "--json"),
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PHASEGRAPH_LLM_BASE_URL": base_url},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"


def test_a_script_that_is_not_a_list_of_answers_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"content": "not in a list"}', encoding="utf-8")
    done = subprocess.run(cli_argv("model-server", "--script", str(bad)),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "is not a JSON list of answers" in done.stderr
    assert done.stdout == ""
