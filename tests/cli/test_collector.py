"""``phasegraph.cli.tune_collector``: the process's opt-in, used by ``serve`` and ``worker``."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from phasegraph.cli._collector import BUSY_THRESHOLDS


def _in_a_fresh_process(code: str) -> str:
    """What ``code`` prints, run in a new interpreter (the collector is process-wide)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


def test_tuning_freezes_what_is_alive_and_makes_young_collections_rarer() -> None:
    out = _in_a_fresh_process(
        """
        import gc
        import phasegraph.cli
        before = gc.get_freeze_count()  # not 0 on every Python: 3.12 starts with some
        phasegraph.cli.tune_collector()
        print(gc.get_freeze_count() > before, gc.get_threshold())
        """
    )
    assert out == f"True {BUSY_THRESHOLDS}"


def test_importing_and_driving_a_run_touches_no_collector_setting() -> None:
    out = _in_a_fresh_process(
        """
        import asyncio, gc
        start = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
        from phasegraph import Engine, open_store

        async def main() -> None:
            async with open_store("memory://") as store:
                engine = Engine(store)
                await asyncio.gather(*(engine.run("hello", {"who": "gc"}) for _ in range(20)))

        asyncio.run(main())
        print(start == (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()))
        """
    )
    assert out == "True"


def test_the_opt_in_is_the_one_the_command_line_uses() -> None:
    from phasegraph.cli import _serve, _worker, tune_collector

    assert tune_collector is _serve.tune_collector is _worker.tune_collector
    assert gc.isenabled()  # looking it up tuned nothing
