"""A chat agent on ``phasegraph serve`` sent three messages while its first turn runs.

The model is the scripted OpenAI-compatible server, in this process on a real socket,
holding every answer until the test lets one go: the test knows when a turn is under
way (its request came) and ends it when it chooses, so nothing depends on timing. The
server is a ``phasegraph serve`` subprocess on a SQLite store.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from builders import cli_argv
from phasegraph import Engine, open_store
from phasegraph.actions.llm._scripted import ScriptedModelServer

CHAT = (Path(__file__).parent.parent / "fixtures" / "messages" / "chat_llm.yaml").read_text()
ANSWERS = [{"content": f"answer {n}"} for n in (1, 2, 3)]


class _Serve:
    """One ``phasegraph serve`` process on a free port, its model the scripted one."""

    def __init__(self, store: str, workdir: Path, model: ScriptedModelServer) -> None:
        self.store, self.workdir, self.model = store, workdir, model
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> str:
        argv = cli_argv("serve", "--store", self.store, "--port", "0", "--lease-ttl", "2", "-q")
        env = {
            **os.environ,
            "PHASEGRAPH_LLM_BASE_URL": self.model.base_url,
            "PHASEGRAPH_LLM_API_KEY": "test-key",
        }
        with (self.workdir / "server.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv, cwd=self.workdir, env=env, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        assert self.process.stdout is not None
        async with asyncio.timeout(30):
            line = (await self.process.stdout.readline()).decode()
        assert line.startswith("phasegraph serving http://"), self.log()
        self.url = line.split()[-1]
        return self.url

    def log(self) -> str:
        return (self.workdir / "server.log").read_text(encoding="utf-8", errors="replace")

    async def stop(self, sig: int) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)
        return await self.process.wait()


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(ANSWERS, by_turn=True, held=True) as server:
        yield server


async def _call(
    session: aiohttp.ClientSession, method: str, path: str, **kw: Any
) -> tuple[int, Any]:
    async with session.request(method, path, **kw) as response:
        return response.status, await response.json()


async def _ok(session: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> Any:
    status, body = await _call(session, method, path, **kw)
    assert status < 300, body
    return body


async def _until(session: aiohttp.ClientSession, run_id: str, done: Any) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            view: dict[str, Any] = await _ok(session, "GET", f"/runs/{run_id}")
            if done(view):
                return view
            await asyncio.sleep(0.05)


def _listening(view: dict[str, Any]) -> bool:
    return view["status"] == "waiting" and view["nodes"]["chat"]["state"] == "listen"


async def _conversation(session: aiohttp.ClientSession, run_id: str) -> list[tuple[str, str]]:
    snapshot = await _ok(session, "GET", f"/runs/{run_id}/snapshot")
    return [(m["role"], m["content"]) for m in snapshot["data"].get("conversation", [])]


async def _start(session: aiohttp.ClientSession, serve: _Serve, policy: str) -> str:
    """Start a chat run with the command line, as its author would: it waits to listen.

    (A server takes no uploaded graph with ``llm:`` actions; it drives a run another
    process started, on the definition the run stored.)
    """
    graph = serve.workdir / f"chat_{policy}.yaml"
    graph.write_text(CHAT.replace("busy: enqueue", f"busy: {policy}"))
    run_id = f"chat-{policy}"
    argv = cli_argv("run", str(graph), "--store", serve.store, "--run-id", run_id, "--quiet")
    process = await asyncio.create_subprocess_exec(*argv, cwd=serve.workdir)
    assert await process.wait() == 3  # waiting
    await _until(session, run_id, _listening)
    return run_id


def _send(run_id: str, text: str, message_id: str) -> tuple[str, str, dict[str, Any]]:
    return ("POST", f"/runs/{run_id}/messages", {"json": {"text": text, "id": message_id}})


async def _message(
    session: aiohttp.ClientSession, run_id: str, text: str, message_id: str
) -> tuple[int, Any]:
    method, path, kw = _send(run_id, text, message_id)
    return await _call(session, method, path, **kw)


async def test_enqueue_answers_three_messages_in_order_across_a_sigkill(
    model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    first, second = _Serve(store, tmp_path, model), _Serve(store, tmp_path, model)
    try:
        async with aiohttp.ClientSession(await first.start()) as session:
            run_id = await _start(session, first, "enqueue")
            status, sent = await _message(session, run_id, "first", "m1")
            assert (status, sent["position"], sent["duplicate"]) == (202, 1, False)
            await model.received(1)  # the first turn is under way, held
            for text, message_id, position in (("second", "m2", 2), ("third", "m3", 3)):
                status, sent = await _message(session, run_id, text, message_id)
                assert (status, sent["position"]) == (202, position), sent
            status, again = await _message(session, run_id, "second, resent", "m2")
            assert (status, again["duplicate"], again["position"]) == (202, True, 2)
            model.release()  # the first answer
            await model.received(2)  # the second turn is under way: the third waits
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL

        async with aiohttp.ClientSession(await second.start()) as session:
            await model.received(3)  # the second turn asked again by the new server
            model.release(2)
            done = await _until(
                session, run_id, lambda v: _listening(v) and v["nodes"]["chat"]["steps"] >= 6
            )
            assert done["status"] == "waiting"
            assert await _conversation(session, run_id) == [
                ("user", "first"),
                ("assistant", "answer 1"),
                ("user", "second"),
                ("assistant", "answer 2"),
                ("user", "third"),
                ("assistant", "answer 3"),
            ]
            history = await _ok(session, "GET", f"/runs/{run_id}/history?limit=1000")
            taken = [
                event["message"]["id"]
                for record in history["records"]
                for event in record["events"]
                if "message" in event
            ]
            assert taken == ["m1", "m2", "m3"]
        assert await second.stop(signal.SIGTERM) == 0, second.log()
    finally:
        for server in (first, second):
            if server.process is not None and server.process.returncode is None:
                await server.stop(signal.SIGKILL)


async def test_reject_refuses_the_second_and_third_naming_the_step(
    model: ScriptedModelServer, tmp_path: Path
) -> None:
    server = _Serve(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, model)
    try:
        async with aiohttp.ClientSession(await server.start()) as session:
            run_id = await _start(session, server, "reject")
            status, _ = await _message(session, run_id, "first", "m1")
            assert status == 202
            await model.received(1)
            for text, message_id in (("second", "m2"), ("third", "m3")):
                status, refused = await _message(session, run_id, text, message_id)
                assert status == 409, refused
                assert refused["code"] == "run_busy"
                assert (refused["node"], refused["state"]) == ("chat", "think")
                assert "busy at node 'chat', state 'think'" in refused["detail"]
            model.release()
            await _until(session, run_id, lambda v: _listening(v) and v["seq"] > 4)
            assert await _conversation(session, run_id) == [
                ("user", "first"),
                ("assistant", "answer 1"),
            ]
            status, bad = await _call(session, "POST", f"/runs/{run_id}/messages", json={"text": 3})
            assert (status, bad["code"]) == (400, "bad_request")
        assert await server.stop(signal.SIGTERM) == 0, server.log()
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop(signal.SIGKILL)


async def test_interrupt_cuts_the_first_turn_and_answers_the_second(
    model: ScriptedModelServer, tmp_path: Path
) -> None:
    server = _Serve(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, model)
    try:
        async with aiohttp.ClientSession(await server.start()) as session:
            run_id = await _start(session, server, "interrupt")
            assert (await _message(session, run_id, "first", "m1"))[0] == 202
            await model.received(1)  # the first turn is under way, held
            assert (await _message(session, run_id, "second", "m2"))[0] == 202
            await model.received(2)  # cut short, and the second asked instead
            asked = model.requests[1]["messages"]
            assert [m["content"] for m in asked if m["role"] == "user"] == ["second"]
            model.release()
            await _until(session, run_id, _listening)
            assert await _conversation(session, run_id) == [
                ("user", "second"),
                ("assistant", "answer 1"),
            ]
            history = await _ok(session, "GET", f"/runs/{run_id}/history?limit=1000")
            cut = [
                event
                for record in history["records"]
                for event in record["events"]
                if event.get("kind") == "message"
            ]
            assert [(e["message"]["id"], e["policy"]) for e in cut] == [("m2", "interrupt")]
        assert await server.stop(signal.SIGTERM) == 0, server.log()
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop(signal.SIGKILL)


async def test_a_message_kept_while_no_server_ran_is_taken_when_one_starts(
    model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    server = _Serve(store, tmp_path, model)
    graph = tmp_path / "chat.yaml"
    graph.write_text(CHAT)
    argv = cli_argv("run", str(graph), "--store", store, "--run-id", "early", "--quiet")
    assert await (await asyncio.create_subprocess_exec(*argv, cwd=tmp_path)).wait() == 3
    async with open_store(store) as kept:
        await Engine(kept).post_message("early", {"text": "while down"}, message_id="m")
    try:
        async with aiohttp.ClientSession(await server.start()) as session:
            await model.received(1)
            model.release()
            await _until(session, "early", lambda v: _listening(v) and v["seq"] > 3)
            assert await _conversation(session, "early") == [
                ("user", "while down"),
                ("assistant", "answer 1"),
            ]
        assert await server.stop(signal.SIGTERM) == 0, server.log()
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop(signal.SIGKILL)


async def test_rollback_discards_the_second_turn_and_answers_the_third(
    model: ScriptedModelServer, tmp_path: Path
) -> None:
    server = _Serve(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path, model)
    try:
        async with aiohttp.ClientSession(await server.start()) as session:
            run_id = await _start(session, server, "rollback")
            assert (await _message(session, run_id, "first", "m1"))[0] == 202
            await model.received(1)
            model.release()
            await _until(session, run_id, lambda v: _listening(v) and v["seq"] > 4)
            assert (await _message(session, run_id, "second", "m2"))[0] == 202
            await model.received(2)  # the second turn is under way, held
            assert (await _message(session, run_id, "third", "m3"))[0] == 202
            await model.received(3)  # the second turn discarded, the third asked
            asked = model.requests[2]["messages"]
            assert [m["content"] for m in asked if m["role"] == "user"] == ["first", "third"]
            model.release()
            # seq 6 took "second", 7 rolled it back, 8 took "third": listening after that.
            await _until(session, run_id, lambda v: _listening(v) and v["seq"] > 8)
            assert await _conversation(session, run_id) == [
                ("user", "first"),
                ("assistant", "answer 1"),
                ("user", "third"),
                ("assistant", "answer 2"),
            ]
            history = await _ok(session, "GET", f"/runs/{run_id}/history?limit=1000")
            kinds = [record["kind"] for record in history["records"]]
            assert kinds.count("rollback") == 1
        assert await server.stop(signal.SIGTERM) == 0, server.log()
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop(signal.SIGKILL)
