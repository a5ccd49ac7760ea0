"""Small builders for machines, graphs and engines used across the interpreter tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from phasegraph.actions import ActionContext, ActionResult
from phasegraph.api import Engine
from phasegraph.model import (
    BudgetDef,
    GraphDef,
    MachineDef,
    MiddlewareDef,
    NodeDef,
    NodeOutcome,
    StateDef,
    TransitionDef,
)
from phasegraph.run import PreparedGraph, RunOptions, prepare
from phasegraph.store.base import Store

TESTS = Path(__file__).resolve().parent
"""The test suite's folder: shared fixtures and golden files live here."""
REPO = TESTS.parent
"""The repository root."""

ActionFn = Callable[[ActionContext], Awaitable[ActionResult]]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class FakeClock:
    """Advances one millisecond per reading, from a fixed epoch."""

    def __init__(self) -> None:
        self._now = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        self._now += timedelta(milliseconds=1)
        return self._now


class CountingIds:
    """Run ids run-1, run-2, ..."""

    def __init__(self) -> None:
        self._n = 0

    def new_run_id(self) -> str:
        self._n += 1
        return f"run-{self._n}"


def _states(*states: StateDef) -> Mapping[str, StateDef]:
    return MappingProxyType({s.name: s for s in states})


def task_machine() -> MachineDef:
    """run --ok--> done (success); run --fail|error--> failed."""
    return MachineDef(
        name="task",
        initial="run",
        states=_states(
            StateDef(name="run", hook="run"),
            StateDef(name="done", final=NodeOutcome.SUCCESS),
            StateDef(name="failed", final=NodeOutcome.FAILED),
        ),
        transitions=(
            TransitionDef(trigger="ok", source=("run",), dest="done"),
            TransitionDef(trigger="fail", source=("run",), dest="failed"),
        ),
    )


def loop_machine(limit: int = 1000) -> MachineDef:
    """work --again--> work (budget ``steps``) --stop--> done."""
    return MachineDef(
        name="loop",
        initial="work",
        states=_states(
            StateDef(name="work", hook="work"),
            StateDef(name="done", final=NodeOutcome.SUCCESS),
            StateDef(name="exhausted", final=NodeOutcome.FAILED),
        ),
        transitions=(
            TransitionDef(
                trigger="again", source=("work",), dest="work", conditions=("budget:steps",)
            ),
            TransitionDef(
                trigger="again", source=("work",), dest="exhausted", unless=("budget:steps",)
            ),
            TransitionDef(trigger="stop", source=("work",), dest="done"),
        ),
        budgets=MappingProxyType(
            {"steps": BudgetDef(name="steps", limit=limit, spend_on=("work",))}
        ),
    )


def review_machine() -> MachineDef:
    """plan → review; confirm → build; reject → plan; timeout → parked; parked → build|plan."""
    states = [
        StateDef(name="plan", hook="plan"),
        StateDef(name="review", hook="review"),
        StateDef(name="parked", hook="parked"),
        StateDef(name="build", hook="build"),
        StateDef(name="done", final=NodeOutcome.SUCCESS),
    ]
    transitions = [
        TransitionDef(trigger="ok", source=("plan",), dest="review"),
        TransitionDef(trigger="confirm", source=("review", "parked"), dest="build"),
        TransitionDef(trigger="reject", source=("review", "parked"), dest="plan"),
        TransitionDef(trigger="timeout", source=("review",), dest="parked"),
        TransitionDef(trigger="ok", source=("build",), dest="done"),
    ]
    return MachineDef(
        name="review",
        initial="plan",
        states=MappingProxyType({s.name: s for s in states}),
        transitions=tuple(transitions),
    )


def graph(
    nodes: Sequence[tuple[str, Sequence[str]]] | Sequence[NodeDef],
    *,
    machines: Sequence[MachineDef] = (),
    machine: str = "task",
    concurrency: int = 3,
    reducers: Mapping[str, str] | None = None,
    middleware: Sequence[str] = (),
    name: str = "test",
) -> GraphDef:
    """A graph from ``(id, needs)`` pairs (all on ``machine``) or ready node definitions."""
    node_defs = tuple(
        n if isinstance(n, NodeDef) else NodeDef(id=n[0], machine=machine, needs=tuple(n[1]))
        for n in nodes
    )
    all_machines = {m.name: m for m in (task_machine(), loop_machine(), *machines)}
    return GraphDef(
        name=name,
        nodes=node_defs,
        machines=MappingProxyType(all_machines),
        concurrency=concurrency,
        reducers=MappingProxyType(dict(reducers or {})),
        middleware=tuple(MiddlewareDef(name=m) for m in middleware),
        digest=f"digest-{name}",
    )


def prepared(definition: GraphDef, actions: Mapping[tuple[str, str], Any]) -> PreparedGraph:
    """Prepare ``definition`` with in-code actions."""
    return prepare(definition, definition.name, actions)


def engine(store: Store, **options: Any) -> Engine:
    """An engine with a fake clock and counting ids."""
    return Engine(store, options=RunOptions(**options), clock=FakeClock(), ids=CountingIds())


def returning(trigger: str, data: Mapping[str, Any] | None = None) -> ActionFn:
    """An async action that always returns ``trigger`` (and ``data``)."""

    async def action(ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(0)
        return ActionResult(trigger=trigger, data=dict(data or {}))

    return action


def cli_argv(*args: str) -> list[str]:
    """argv that runs the ``phasegraph`` console script of this environment in a subprocess."""
    script = Path(sys.executable).with_name("phasegraph")
    if script.exists():
        return [str(script), *args]
    return [
        sys.executable,
        "-c",
        "from phasegraph.cli._main import main; raise SystemExit(main())",
        *args,
    ]


@contextlib.asynccontextmanager
async def serve_command(
    *args: str, cwd: Path, env: Mapping[str, str]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``phasegraph serve ARGS`` as a process: it and the address it printed; stopped on exit."""
    process = await asyncio.create_subprocess_exec(
        *cli_argv("serve", *args),
        cwd=cwd,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            first = (await process.stdout.readline()).decode()
        assert first.startswith("phasegraph serving "), first
        yield process, first.split()[-1]
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


@contextlib.contextmanager
def sqlite_db(path: str | Path, **options: Any) -> Iterator[sqlite3.Connection]:
    """A connection to a SQLite file, for a test that reads or damages the store's tables.

    Committed when the block ends well, as ``with sqlite3.connect(...)`` does, and closed,
    which that does not (Python 3.13 warns of every connection left to the collector).
    """
    conn = sqlite3.connect(path, **options)
    try:
        with conn:
            yield conn
    finally:
        conn.close()
