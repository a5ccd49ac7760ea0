"""Drive a run and its child runs in this process, until none of them can go on.

Without workers (``phasegraph run`` on SQLite, a program with an :class:`~phasegraph.Engine`)
nobody else would drive the child runs a run waits for. :func:`drive_locally` drives the
run, every child run it launches (and theirs), and the run again as their answers come
in: each with the one run driver (:class:`~phasegraph.worker._driver.RunDriver`) over an
in-process mailbox, at most ``max_runs`` runs stepping at once. It returns once every
run it drove is idle: finished, or waiting for something this process cannot give (a
person's answer, a deadline).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, final

from phasegraph.api import Engine
from phasegraph.model import RunState
from phasegraph.worker._driver import RunDriver
from phasegraph.worker._local_mail import LocalMailbox

__all__ = ["drive_locally"]

_log = logging.getLogger("phasegraph.worker")

MAX_RUNS: Final = 8
"""Runs :func:`drive_locally` steps at once by default."""


async def drive_locally(engine: Engine, run_id: str, *, max_runs: int = MAX_RUNS) -> RunState:
    """Drive the run and its child runs here until none can go on; the run as left then.

    A child run that ended answers its parent's gate, and the parent goes on here too;
    a run that is itself a child answers its parent when it ends, and the parent is
    driven here as well.

    Args:
        engine: The engine (and store) the runs are kept with.
        run_id: The run.
        max_runs: Runs stepping at once (a run waiting for its children holds none).

    Raises:
        RunNotFoundError: No such run.
    """
    host = _Host(engine, max_runs)
    try:
        host.submit(run_id)
        await host.idle()
    finally:
        await host.aclose()
    return await engine.get(run_id)


@final
class _Host:
    """Starts one drive per run that needs one, and knows when none is left."""

    def __init__(self, engine: Engine, max_runs: int) -> None:
        self._mail = LocalMailbox(engine.clock, self.submit)
        self._driver = RunDriver(engine, self._mail, log=_log, max_runs=max_runs)
        self._drives: dict[str, asyncio.Task[None]] = {}
        self._failures: list[BaseException] = []

    def submit(self, run_id: str) -> None:
        """Drive the run, or have its drive look at its mail."""
        if run_id in self._drives:
            self._driver.notify(run_id)  # or its drive has yet to start, and looks first
            return
        name = f"phasegraph:drive:{run_id}"
        self._drives[run_id] = asyncio.create_task(self._drive(run_id), name=name)

    async def idle(self) -> None:
        """Until no drive is left (each drive may start others).

        Raises:
            BaseException: What a drive raised (the driver keeps its runs' own errors in
                them). One that is no :class:`Exception` (the process going down) stops
                every other drive at its last committed step first.
        """
        while self._drives:
            await asyncio.wait(list(self._drives.values()))
        if self._failures:
            raise self._failures[0]

    async def aclose(self) -> None:
        """Stop the drives left (at their last committed step) and disarm the wake-ups."""
        tasks = list(self._drives.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._mail.aclose()
        await self._driver.aclose()

    async def _drive(self, run_id: str) -> None:
        try:
            await self._driver.drive(run_id)
        except Exception as exc:  # the store failed, say: said once the others are idle
            self._failures.append(exc)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the process goes down: so do the other drives
            self._failures.append(exc)
            for task in self._drives.values():
                if task is not asyncio.current_task():
                    task.cancel()
        finally:
            # No await between the drive's end and this: mail posted later starts a drive.
            del self._drives[run_id]
            if self._mail.has_mail(run_id):
                self.submit(run_id)
