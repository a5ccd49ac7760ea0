"""Durable streams across a SIGKILL of ``phasegraph serve``, and from a worker's run.

The scripted model (in this process) holds its streamed answer until the test releases
it, so the server is killed mid-turn by construction, not by timing. A client resumes
with the last event id it read from the killed server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from builders import cli_argv, serve_command
from phasegraph import Engine, open_store
from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.run._stream import decode_batches
from phasegraph.testing import isolated_redis_url
from postgres_kit import isolated_postgres_url
from stream_kit import (
    STREAMING,
    WORDS,
    assert_ordered_once,
    committed_text,
    count_deltas,
    deltas,
    frames,
    held_answer,
    texts,
)


async def _created(store_url: str, folder: Path) -> None:
    """The run, created and not driven: a server or a worker drives it."""
    graph = folder / "chat.yaml"
    graph.write_text(STREAMING, encoding="utf-8")
    async with (
        open_store(store_url) as store,
        Engine(store) as engine,
        engine.start(graph, {"task": "count"}, run_id="chat"),
    ):
        pass


async def _stored_deltas(store_url: str, count: int) -> None:
    """Wait until a durable driver has written ``count`` deltas to the store."""
    async with open_store(store_url) as store, asyncio.timeout(30):
        # Another process writes it: nothing here to wait on but the store.
        while len(decode_batches("chat", await store.read_stream("chat"))) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def _completed(session: aiohttp.ClientSession) -> None:
    async with asyncio.timeout(30):
        while True:
            async with session.get("/runs/chat") as response:
                if (await response.json())["status"] == "completed":
                    return
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("durable", [False, True], ids=["in-memory", "durable"])
async def test_after_a_sigkill_mid_turn_a_client_resumes_on_the_restarted_server(
    tmp_path: Path, durable: bool
) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with ScriptedModelServer(held_answer(4), by_turn=True) as model:
        await _created(store_url, tmp_path)
        env = {**os.environ, "PHASEGRAPH_LLM_BASE_URL": model.base_url}
        argv = ("--store", store_url, "--port", "0", "--lease-ttl", "1", "-q")
        argv += ("--durable-stream",) if durable else ()
        async with serve_command(*argv, cwd=tmp_path, env=env) as (process, url):
            async with (
                aiohttp.ClientSession(url) as session,
                session.get("/runs/chat/events") as response,
            ):
                before = await frames(response, until=count_deltas(2))
            if durable:
                await _stored_deltas(store_url, 4)
            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
        headers = {"Last-Event-ID": before[-1]["id"]}
        async with (
            serve_command(*argv, cwd=tmp_path, env=env) as (process, url),
            aiohttp.ClientSession(url) as session,
        ):
            if durable:
                # Mid-turn still (the model holds the turn again): the deltas the killed
                # server streamed after the client's last one come from the store.
                async with session.get("/runs/chat/events", headers=headers) as response:
                    after = await frames(response, until=count_deltas(2))
                    assert texts(after) == " w3 w4"
                    model.release_streams()
                    after += await frames(response)
            else:
                model.release_streams()
                await _completed(session)
                async with session.get("/runs/chat/events", headers=headers) as response:
                    after = await frames(response)
                assert deltas(after) == []  # folded: the committed turn stands for them
        assert_ordered_once(before + after)
        assert committed_text(after) == [WORDS]
        assert after[-1]["kind"] == "run_completed"


@contextlib.asynccontextmanager
async def _worker(store_url: str, env: dict[str, str], cwd: Path) -> AsyncIterator[None]:
    argv = cli_argv("worker", "--store", store_url, "--durable-stream", "--lease-ttl", "2", "-q")
    process = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env)
    try:
        yield
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


@pytest.fixture(params=["redis", "postgres"])
async def queue_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A store with a work queue, under a prefix or schema of this test's own."""
    if request.param == "redis":
        async with isolated_redis_url(request.getfixturevalue("redis_url")) as url:
            yield url
    else:
        with isolated_postgres_url(request.getfixturevalue("postgres_url")) as url:
            yield url


async def test_a_run_a_worker_drives_streams_to_a_client_of_the_server_which_resumes(
    tmp_path: Path, queue_url: str
) -> None:
    store_url = queue_url
    async with ScriptedModelServer(held_answer(4), by_turn=True) as model:
        env = {**os.environ, "PHASEGRAPH_LLM_BASE_URL": model.base_url}
        argv = ("--store", store_url, "--port", "0", "--queue", "-q")
        async with (
            serve_command(*argv, cwd=tmp_path, env=env) as (_, url),
            _worker(store_url, env, tmp_path),
            aiohttp.ClientSession(url) as session,
        ):
            await _created(store_url, tmp_path)
            done = await asyncio.create_subprocess_exec(
                *cli_argv("resume", "chat", "--store", store_url, "--detach", "-q"),
                cwd=tmp_path,
                env=env,
            )
            assert await done.wait() == 0
            async with session.get("/runs/chat/events") as response:
                before = await frames(response, until=count_deltas(2))
            headers = {"Last-Event-ID": before[-1]["id"]}
            async with session.get("/runs/chat/events", headers=headers) as response:
                after = await frames(response, until=count_deltas(2))
                assert texts(after) == " w3 w4"
                model.release_streams()
                after += await frames(response)
        # The deltas after the release may be folded before the server reads them: the
        # committed text is what is certain.
        assert_ordered_once(before + after)
        assert committed_text(after) == [WORDS]
        assert after[-1]["kind"] == "run_completed"
