"""``phasegraph status --follow``: every step is shown, though the run moves on between looks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.api import Engine, StreamSettings
from phasegraph.cli import main
from phasegraph.cli._main import build_parser
from phasegraph.cli._runs import _follow
from phasegraph.errors import StoreUnavailableError
from phasegraph.events import Event, EventId
from phasegraph.model import StepRecord
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store
from stream_kit import STREAMING, WORDS, held_answer


def _progress_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[")]


def test_follow_shows_every_step_though_the_run_moves_on_between_its_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step committed between the follower's read of new records and its next look is
    shown too: here the driver commits one just after each read, every time."""
    assert main(["run", "hello", "--input", "who=x", "--store", f"sqlite:///{tmp_path}/a.db"]) == 0
    expected = _progress_lines(capsys.readouterr().err)
    assert len(expected) > 3
    url = f"sqlite:///{tmp_path}/b.db"

    async def follow() -> int:
        async with open_store(url) as store:
            driver = Engine(store)
            async with driver.start("hello", {"who": "x"}, run_id="r") as run:

                class Racing(Engine):
                    async def history(
                        self, run_id: str, *, start: int = 0, stop: int | None = None
                    ) -> list[StepRecord]:
                        read = await super().history(run_id, start=start, stop=stop)
                        await run.next()  # a step lands before the follower looks again
                        return read

                args = build_parser().parse_args(["status", "r", "--follow", "--store", url])
                return await _follow(args, Racing(store))

    assert asyncio.run(follow()) == 0
    assert _progress_lines(capsys.readouterr().err) == expected


def test_follow_goes_on_after_a_store_outage_from_the_last_event_it_showed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reads that fail for a while (the store unreachable) are said once and retried:
    every step is shown once, in order, as ``run`` shows it."""
    assert main(["run", "hello", "--input", "who=x", "--store", f"sqlite:///{tmp_path}/a.db"]) == 0
    expected = _progress_lines(capsys.readouterr().err)
    url = f"sqlite:///{tmp_path}/b.db"

    async def follow() -> int:
        async with open_store(url) as store:
            driver = Engine(store)
            async with driver.start("hello", {"who": "x"}, run_id="r") as run:
                reads = 0

                class Dropping(Engine):
                    async def history(
                        self, run_id: str, *, start: int = 0, stop: int | None = None
                    ) -> list[StepRecord]:
                        nonlocal reads
                        reads += 1
                        await run.next()  # the run moves on whether or not we can look
                        if reads in (2, 3, 4):
                            raise StoreUnavailableError("the store is unreachable")
                        return await super().history(run_id, start=start, stop=stop)

                args = build_parser().parse_args(["status", "r", "--follow", "--store", url])
                return await _follow(args, Dropping(store))

    assert asyncio.run(follow()) == 0
    err = capsys.readouterr().err
    assert err.count("cannot read the store (the store is unreachable); retrying") == 1
    assert _progress_lines(err) == expected


async def test_follow_shows_a_durable_drivers_streamed_text_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's deltas a ``--durable-stream`` driver writes reach the follower's
    display, with their ids, after the step they follow, each once."""
    url = f"sqlite:///{tmp_path}/runs.db"
    seen: list[Event] = []
    async with (
        ScriptedModelServer(held_answer(3), by_turn=True) as model,
        open_store(url) as store,
    ):
        monkeypatch.setenv("PHASEGRAPH_LLM_BASE_URL", model.base_url)
        driver = Engine(store, streams=StreamSettings(durable=True, batch=1))
        definition = load_graph_text(STREAMING, name="chat.yaml")
        follower = Engine(store)
        follower.bus.subscribe(seen.append)
        driving = asyncio.create_task(driver.run(definition, {"task": "t"}, run_id="r"))
        await model.held.wait()
        args = build_parser().parse_args(["status", "r", "--follow", "--store", url, "-q"])
        following = asyncio.create_task(_follow(args, follower))
        async with asyncio.timeout(30):
            while len([e for e in seen if e.kind == "llm_delta"]) < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        model.release_streams()
        await driving
        assert await following == 0
    deltas = [e for e in seen if e.kind == "llm_delta"]
    assert "".join(e.fields["text"] for e in deltas[:3]) == "w1 w2 w3"
    ids = [EventId.of(e) for e in seen]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert [e.fields["text"] for e in seen if e.kind == "llm_text"] == [WORDS]
