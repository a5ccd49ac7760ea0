"""``phasegraph status --follow``: every step is shown, though the run moves on between looks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.cli._main import build_parser
from phasegraph.cli._runs import _follow
from phasegraph.model import StepRecord
from phasegraph.store import open_store


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
