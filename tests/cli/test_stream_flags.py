"""``--durable-stream`` and ``--stream-retention`` on the commands that drive runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from builders import cli_argv
from phasegraph import open_store
from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.run._stream import decode_batches
from stream_kit import STREAMING, WORDS, held_answer


async def test_run_with_durable_stream_writes_the_turn_in_flight_to_the_store(
    tmp_path: Path,
) -> None:
    """Mid-turn, another process reads the deltas from the store; once the turn
    commits, they are gone and the committed text is in the record."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    graph = tmp_path / "chat.yaml"
    graph.write_text(STREAMING, encoding="utf-8")
    async with ScriptedModelServer(held_answer(3), by_turn=True) as model:
        env = {**os.environ, "PHASEGRAPH_LLM_BASE_URL": model.base_url}
        argv = cli_argv("run", str(graph), "--input", "task=t", "--run-id", "chat", "-q")
        process = await asyncio.create_subprocess_exec(
            *argv, "--store", url, "--durable-stream", env=env, cwd=tmp_path
        )
        async with open_store(url) as store, asyncio.timeout(60):
            while len(found := decode_batches("chat", await store.read_stream("chat"))) < 3:  # noqa: ASYNC110 - another process writes it
                await asyncio.sleep(0.05)
            assert "".join(e.fields["text"] for e in found) == "w1 w2 w3"
            model.release_streams()
            assert await process.wait() == 0
            assert await store.read_stream("chat") == []
            history = [r async for _, r in store.history("chat")]
    assert history  # the turn is committed, its text in its record
    assert WORDS.encode() in b"".join(history)


def test_a_bad_retention_in_the_environment_is_named() -> None:
    env = {**os.environ, "PHASEGRAPH_STREAM_RETENTION": "lots"}
    done = subprocess.run(
        cli_argv("run", "hello", "--store", "memory://", "--input", "who=x"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PHASEGRAPH_STREAM_RETENTION='lots' is not a whole number >= 1" in done.stderr
    assert "Traceback" not in done.stderr
