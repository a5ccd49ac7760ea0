"""The viewer resumes a model's streamed text after its connection drops, in a real browser.

``phasegraph serve`` (a subprocess) drives a run whose model (scripted, in a thread of
this process) streams four words and holds the turn until the test releases it. The page
reaches the server through a TCP relay the test cuts mid-turn (every open connection
closed, as a proxy or a flaky network would): the page reconnects with the id of the
last delta it saw, and every text it ever shows is a prefix of the answer — nothing
missed, nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_viewer_browser import TOKEN, _in_thread, serving

from browser_kit import browser, signed_in
from phasegraph import Engine, open_store
from phasegraph.actions.llm._scripted import ScriptedModelServer
from stream_kit import STREAMING, WORDS, held_answer

__all__ = ["browser"]


class _Relay:
    """A TCP relay to the server whose open connections the test can cut."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.upstream = 0
        self.writers: set[asyncio.StreamWriter] = set()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), loop
        ).result(30)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        self.writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers -= {writer, up_writer}

    def cut(self) -> None:
        """Close every connection open now (new ones go through)."""

        def close() -> None:
            for writer in self.writers:
                writer.transport.abort()

        self.loop.call_soon_threadsafe(close)


class _ModelThread:
    """The scripted model on an event loop of its own thread (Playwright owns this one)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ScriptedModelServer(held_answer(4), by_turn=True)
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        self.relay = _Relay(self.loop)

    def release_streams(self) -> None:
        self.loop.call_soon_threadsafe(self.server.release_streams)

    def close(self) -> None:
        async def shut() -> None:  # on the loop's own thread: asyncio objects are not thread-safe
            self.relay.server.close()
            for writer in self.relay.writers:
                writer.transport.abort()
            await self.server.aclose()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()  # else its self-pipe sockets warn, unclosed, in a later test


@pytest.fixture
def model() -> Iterator[_ModelThread]:
    started = _ModelThread()
    try:
        yield started
    finally:
        started.close()


async def _created(store: str, graph: Path) -> str:
    """The run, created in the server's store and not driven: the page's Resume drives it."""
    async with open_store(store) as opened, Engine(opened).start(graph, {"task": "t"}) as run:
        return run.run_id


def test_the_viewer_resumes_streamed_text_after_a_drop_with_the_last_delta_id(
    browser: Any, model: _ModelThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", model.server.base_url)
    graph = tmp_path / "chat.yaml"
    graph.write_text(STREAMING, encoding="utf-8")
    relay = model.relay
    address = f"127.0.0.1:{relay.port}"
    with serving(tmp_path, "--allowed-host", address) as served:
        relay.upstream = int(served.url.rsplit(":", 1)[1])
        served.url = f"http://{address}"  # the page goes through the relay
        with signed_in(browser, served.url, TOKEN) as page:
            run_id = _in_thread(_created(served.store, graph))
            cursors: list[str] = []
            page.on(
                "request",
                lambda r: (
                    cursors.append(r.headers.get("last-event-id", ""))
                    if r.url.endswith(f"/runs/{run_id}/events")
                    else None
                ),
            )
            page.goto(f"{served.url}/ui#/runs/{run_id}")
            page.locator(".live.is-live").wait_for()
            page.locator("g.node[data-node='agent']").click()
            page.evaluate(
                """() => {
                window.streamed = [];
                const box = document.querySelector('.live-text');
                new MutationObserver(() => window.streamed.push(box.textContent))
                  .observe(box, {childList: true, subtree: true, characterData: true});
            }"""
            )
            page.click("button:text-is('Resume')")
            page.locator(".live-text", has_text="w1 w2 w3 w4").wait_for()
            relay.cut()
            page.locator(".live.is-reconnecting").wait_for()
            page.locator(".live.is-live").wait_for(timeout=30_000)
            model.release_streams()
            page.locator("h1 .badge.st-completed").wait_for(timeout=60_000)
            shown = page.evaluate("window.streamed")
    # The page came back after the fourth delta it saw, and showed each word once.
    assert any(re.fullmatch(r"\d+\+\d+\.4", cursor) for cursor in cursors), cursors
    texts = [text.split("streaming…", 1)[-1] for text in shown if text]
    assert texts[-1] == WORDS
    assert all(WORDS.startswith(text) for text in texts), texts
