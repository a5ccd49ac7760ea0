"""Crash-equivalence with the graph's own actions.

A run resumed after a crash must end as an uninterrupted one does.

The engine guarantees that everything committed is never redone and that an action whose
step was not committed runs again (at least once). A graph keeps that promise only if
its actions keep no state outside the run: an action that counts its calls in a global,
appends to a file or reads the clock behaves differently when it runs again, and a run
resumed after a crash ends with different data than one that never stopped. ``replay``
cannot see this (it re-uses recorded results) and the property kit cannot either (it
replaces the actions); this check runs the real ones.

:func:`crash_equivalence` runs the graph once uninterrupted, then once per commit with a
crash injected just before that commit (the step's action has run, its commit is lost)
and resumed from the store by a fresh interpreter. Each node's steps (trigger, state
reached, data written) and the final data are compared with the uninterrupted run's; the
first difference is reported with the crash point that caused it. The crashed runs are
independent, so a few run at once, each in a process of its own and a working folder of
its own (:mod:`phasegraph.testing._folders`).

What is compared is what the engine makes deterministic: the order in which nodes of one
layer finish is timing, not behaviour, so a key their ``append`` reducer gathers is
compared as a multiset (its items in any order), in each step and in the final data.
Files outside the run are the author's business.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from phasegraph.actions import ActionResult
from phasegraph.api import Engine
from phasegraph.errors import IllegalTriggerError
from phasegraph.model import GraphDef, StepRecord, replace
from phasegraph.run import PreparedGraph, Run, RunOptions, prepare
from phasegraph.run._children import CHILD_RUN
from phasegraph.run._effects import OUTCOME_UNKNOWN, RUN_AGAIN
from phasegraph.spec import load_graph
from phasegraph.store import Commit, ForwardingStore, Lease, Store
from phasegraph.store.memory import MemoryStore
from phasegraph.testing._folders import Folders, working_folders
from phasegraph.worker import drive_locally

__all__ = ["CrashReport", "Difference", "RunTrace", "crash_equivalence", "uninterrupted_run"]

_RUN_ID = "crash-equivalence"
_MAX_COMMITS = 500  # a graph that commits more than this in one run is cut short
_WORKERS = min(4, 2 * (os.cpu_count() or 1))
"""Crashed runs at once: two a core, as each mostly waits on its actions (subprocesses,
a model server)."""


# Not an Exception: the process dies here, so nothing may take it for an action's error
# (a commit made while an action runs, such as a tool call's result, is in its task).
class _InjectedCrash(BaseException):
    """Raised instead of the commit a crash is injected before."""


class _CrashingStore(ForwardingStore):
    """A memory store that loses its ``crash_at``-th commit (raising instead), once."""

    def __init__(self, crash_at: int | None) -> None:
        super().__init__(MemoryStore())
        self.crash_at = crash_at
        self.commits = 0

    async def commit(self, lease: Lease, commit: Commit) -> None:
        self.commits += 1
        if self.crash_at is not None and self.commits == self.crash_at:
            self.crash_at = None  # the resumed run commits normally
            raise _InjectedCrash(f"crash injected before commit {self.commits}")
        await super().commit(lease, commit)


class _FixedClock:
    """One instant for every reading: records of two runs compare equal."""

    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Difference:
    """The first place a run resumed after a crash differs from the uninterrupted run.

    Attributes:
        crash_before: The commit the crash was injected before (1 is the run's creation,
            so crashes start at 2); 0 when two uninterrupted runs already differ.
        node: The node whose steps differ (``None``: the final data or status differ).
        step: The node's step index (1-based) that differs.
        expected: What the uninterrupted run did there.
        actual: What the resumed run did there.
    """

    crash_before: int
    node: str | None
    step: int
    expected: str
    actual: str

    def where(self) -> str:
        """The node and step, or the final run, in words."""
        return f"node {self.node!r}, step {self.step}" if self.node else "the final run"

    def __str__(self) -> str:
        where = self.where()
        if self.crash_before == 0:
            head = f"two uninterrupted runs of the same input differ at {where}"
            labels = ("first run: ", "second run:")
        else:
            head = f"after a crash before commit {self.crash_before} and a resume, {where} differs"
            labels = ("uninterrupted:", "resumed:     ")
        return (
            f"{head}:\n  {labels[0]} {self.expected}\n  {labels[1]} {self.actual}\n"
            "an action keeps state outside the run (a global, a file, the clock...) or is "
            "not deterministic: a resumed run re-runs the action of the lost step and must "
            "get the same result; keep that state in the run's data instead"
        )


@dataclass(frozen=True, slots=True)
class RunTrace:
    """How one run of the graph's own actions went.

    Attributes:
        status: How it ended (``completed``, ``failed``, ``waiting`` at a gate...).
        data: Its final data, as sorted JSON.
        steps: Node → its steps in order (trigger, state reached, data written).
        commits: Commits it made.
        errors: Its error log, one line per entry (node, state, message).
    """

    status: str
    data: str
    steps: Mapping[str, list[str]]
    commits: int
    errors: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """It ended failed or cancelled, or never ended (cut short after many commits)."""
        return self.status in {"failed", "cancelled", "running"}

    def describe(self) -> str:
        """The run as a person reads it: each node's steps, then the error log."""
        lines = [f"the run ended {self.status} after {self.commits} commits:"]
        for node, steps in self.steps.items():
            lines.append(f"  node {node!r}: " + " ; ".join(steps))
        lines += [f"  error: {error}" for error in self.errors]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What :func:`crash_equivalence` found.

    Attributes:
        commits: Commits of the uninterrupted run (each is a crash point).
        crashes: Crash points tried.
        first: The first difference found, or ``None`` when every resumed run matched.
        status: How the uninterrupted run ended.
        varying: Where two uninterrupted runs wrote different data (the crashed runs
            were then compared on triggers and states only), or ``None``.
        folders: Where the runs worked, in words.
    """

    commits: int
    crashes: int
    first: Difference | None
    status: str
    varying: Difference | None = None
    folders: str = ""


def _appended(definition: GraphDef) -> frozenset[str]:
    """Keys an ``append`` reducer gathers: their order is the order nodes finished in."""
    return frozenset(key for key, reducer in definition.reducers.items() if reducer == "append")


def _json(data: Mapping[str, Any], unordered: frozenset[str]) -> str:
    """Data as sorted JSON, each key of ``unordered`` as a multiset (its items sorted)."""
    plain = _plain(data)
    for key in unordered & plain.keys():
        if isinstance(plain[key], list):
            plain[key] = sorted(plain[key], key=_canonical)
    return json.dumps(plain, sort_keys=True, default=repr)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _steps(records: list[StepRecord], unordered: frozenset[str]) -> dict[str, list[str]]:
    steps: dict[str, list[str]] = {}
    for record in records:
        if record.node is None or record.kind == "created" or _settling_an_effect(record):
            continue
        text = f"{record.kind}"
        if record.trigger is not None:
            text += f" --{record.trigger}-->"
        if record.dest:
            text += " " + "/".join(record.dest)
        written = _written(record, unordered)
        if written:
            text += f" writes {_json(written, unordered)}"
        steps.setdefault(record.node, []).append(text)
    return steps


def _written(record: StepRecord, unordered: frozenset[str]) -> Mapping[str, Any]:
    """What a step wrote: for an appended key, the items it added, not the list so far.

    The list so far holds what the nodes that finished before it added, in the order
    they finished; the record keeps the step's own update of a reduced key beside it.
    """
    if not unordered:
        return record.data
    raw = (record.result or {}).get("data") or {}
    written = {key: value for key, value in record.data.items() if key not in unordered}
    written.update((key, value) for key, value in raw.items() if key in unordered)
    return written


def _load(source: str) -> GraphDef:
    """The graph, without its run budget.

    A crash charges the model call it cut off at its reserved most (``docs/budgets.md``),
    so under a budget a crashed run may run out sooner than an uninterrupted one, by
    design: what is compared here is the actions, not the spend.
    """
    return replace(load_graph(source), budget=None)


def _settling_an_effect(record: StepRecord) -> bool:
    """A step only a crash makes: a ledger entry, a charge, a question about an effect.

    The charge is a crashed model call's reservation; the question, about an effect
    whose outcome is unknown.
    """
    if record.ledger is not None or record.kind == "settle":
        return True
    return any(str(e.get("kind", "")).startswith(OUTCOME_UNKNOWN) for e in record.events)


async def _to_end(run: Run) -> None:
    for _ in range(_MAX_COMMITS):
        if await run.next() is None:
            return


async def _drive(
    store: Store,
    prepare_graph: Callable[[], PreparedGraph],
    run_input: Mapping[str, Any],
    approve: bool,
) -> Engine:
    """Run to the end (or a wait), resuming after the injected crash.

    With ``approve``, each gate that accepts ``confirm`` is answered with it. The child
    runs the run waits for are driven here too, and the run with them, as ``phasegraph
    run`` does (:func:`~phasegraph.worker.drive_locally`): a crash may come in any of
    their commits. The crash ends the interpreter and everything it built (the prepared
    graph, with its middleware's memory); the process goes on, as when a commit fails in
    a server and the run is resumed, so state an action keeps in its module survives, as
    it would there.
    """
    engine = _engine(store)
    try:
        async with engine.start(prepare_graph(), run_input, run_id=_RUN_ID) as run:
            await _to_end(run)
    except _InjectedCrash:
        pass
    for _ in range(_MAX_COMMITS):
        engine = _engine(store)
        try:
            async with engine.open(_RUN_ID, graph=prepare_graph()) as run:
                await _to_end(run)
                uncertain = [
                    i.id for i in run.state.interrupts.values() if i.kind == OUTCOME_UNKNOWN
                ]
                if uncertain:
                    # The crash came after the effect, before its result was committed: at
                    # least once, as for any action whose step was lost.
                    await run.reply(uncertain[0], ActionResult(trigger=RUN_AGAIN))
                    await _to_end(run)
                pending = sorted(i.id for i in run.state.interrupts.values() if i.kind != CHILD_RUN)
                children = len(pending) < len(run.state.interrupts)
                if approve and pending and not run.state.status.terminal:
                    try:
                        await run.reply(pending[0], ActionResult(trigger="confirm"))
                    except IllegalTriggerError:
                        approve = False  # this gate needs a real answer
                    else:
                        continue  # reopened: the run goes on from the answer
            if not children:
                return engine
            state = await drive_locally(engine, _RUN_ID)
            asks = any(i.kind != CHILD_RUN for i in state.interrupts.values())
            if not (approve and asks) or state.status.terminal:
                return engine  # else: gates of its own opened since, to answer
        except _InjectedCrash:
            continue
    return engine


def _engine(store: Store) -> Engine:
    return Engine(store, options=RunOptions(owner="crash-equivalence"), clock=_FixedClock())


async def _one(
    source: str,
    definition: GraphDef,
    run_input: Mapping[str, Any],
    crash_at: int | None,
    approve: bool,
) -> RunTrace:
    store = _CrashingStore(crash_at)
    async with store:
        engine = await _drive(store, lambda: prepare(definition, source), run_input, approve)
        state = await engine.get(_RUN_ID)
        history = await engine.history(_RUN_ID)
    unordered = _appended(definition)
    data = _json(state.data, unordered)
    errors = tuple(
        f"node {e.node!r} in {e.state!r}: {e.message}" + (" (recovered)" if e.recovered else "")
        for e in state.errors
    )
    steps = _steps(list(history), unordered)
    return RunTrace(str(state.status), data, steps, store.commits, errors)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _trial(
    source: str,
    definition: GraphDef,
    run_input: Mapping[str, Any],
    crash_at: int | None,
    approve: bool,
) -> RunTrace:
    """One run, in this process."""
    # A forked process may hold a running event loop's marker from its parent: clear it.
    asyncio.events._set_running_loop(None)
    return asyncio.run(_one(source, definition, run_input, crash_at, approve))


def _first_difference(
    crash_before: int, straight: RunTrace, other: RunTrace, *, shape_only: bool
) -> Difference | None:
    expected, actual = straight.steps, other.steps
    for node in [*expected, *(n for n in actual if n not in expected)]:
        ours, theirs = expected.get(node, []), actual.get(node, [])
        for index in range(max(len(ours), len(theirs))):
            a = ours[index] if index < len(ours) else "(no such step)"
            b = theirs[index] if index < len(theirs) else "(no such step)"
            if shape_only:
                a, b = a.partition(" writes ")[0], b.partition(" writes ")[0]
            if a != b:
                return Difference(crash_before, node, index + 1, a, b)
    if straight.status != other.status or (not shape_only and straight.data != other.data):
        return Difference(
            crash_before,
            None,
            0,
            f"{straight.status} with data {straight.data}",
            f"{other.status} with data {other.data}",
        )
    return None


def uninterrupted_run(
    source: str, run_input: Mapping[str, Any] | None = None, *, approve: bool = False
) -> RunTrace:
    """Run the graph once with its own actions, uninterrupted, in a fresh process.

    Args:
        source: The graph: a built-in name or a file path.
        run_input: The run's input.
        approve: Answer every gate that accepts ``confirm`` with it.
    """
    [(_, trace)] = _trials(source, dict(run_input or {}), [None], approve, _folders())
    return trace


def crash_equivalence(
    source: str,
    run_input: Mapping[str, Any] | None = None,
    *,
    approve: bool = False,
    first: RunTrace | None = None,
) -> CrashReport:
    """Compare uninterrupted runs with runs crashed before each commit and resumed.

    Every run happens in a fresh process forked from this one (where fork exists), so an
    action's module globals start as imported each time, as after a real restart; a few
    run at once. When two uninterrupted runs already write different data (an action
    that is not deterministic, e.g. one making a temporary folder), the crashed runs are
    compared on their triggers and states only, and the report says so.

    Args:
        source: The graph: a built-in name or a file path.
        run_input: The run's input.
        approve: Answer every gate that accepts ``confirm`` with it (as ``run
            --approve``), so the runs go past human gates.
        first: The uninterrupted run, when :func:`uninterrupted_run` already made it.
    """
    given = dict(run_input or {})
    straight = first or uninterrupted_run(source, given, approve=approve)
    # Commit 1 creates the run: a crash before it leaves nothing to resume.
    points: list[int | None] = [None, *range(2, straight.commits + 1)]
    shape_only = False
    varying: Difference | None = None
    folders = _folders()
    said = folders.describe()
    for crash_at, trace in _trials(source, given, points, approve, folders):
        if crash_at is None:  # the second uninterrupted run
            varying = _first_difference(0, straight, trace, shape_only=False)
            shape_only = varying is not None
            found = _first_difference(0, straight, trace, shape_only=True)
            if found is not None:
                return CrashReport(straight.commits, 0, found, straight.status, varying, said)
            continue
        found = _first_difference(crash_at, straight, trace, shape_only=shape_only)
        if found is not None:
            crashes = crash_at - 1
            return CrashReport(straight.commits, crashes, found, straight.status, varying, said)
    crashes = max(straight.commits - 1, 0)
    return CrashReport(straight.commits, crashes, None, straight.status, varying, said)


def _folders() -> Folders:
    """Copies of this folder, one a run, when the runs are forked processes of their own."""
    return working_folders(private="fork" in multiprocessing.get_all_start_methods())


def _trials(
    source: str,
    run_input: Mapping[str, Any],
    points: Sequence[int | None],
    approve: bool,
    folders: Folders,
) -> Iterator[tuple[int | None, RunTrace]]:
    """Each run in ``points`` order: crashed before commit ``point`` (``None``: not crashed).

    Up to :data:`_WORKERS` run at once, each in a process forked for it and a working
    folder of its own (``folders``), removed when it ends. Stopping the iteration ends the
    runs still going.
    """
    # Loaded once here: the definition is plain data; preparing it (which imports the
    # actions) happens in each run's own process.
    definition = _load(source)
    if "fork" not in multiprocessing.get_all_start_methods():
        for point in points:
            yield point, _trial(source, definition, run_input, point, approve)
        return
    context = multiprocessing.get_context("fork")
    running: dict[int, tuple[BaseProcess, Connection, Path | None]] = {}
    done: dict[int, RunTrace | BaseException] = {}
    started = 0
    try:
        for index, point in enumerate(points):
            while index not in done:
                while started < len(points) and len(running) < _WORKERS:
                    receive, send = context.Pipe(duplex=False)
                    folder = folders.make()
                    trial = (source, definition, run_input, points[started], approve)
                    process: BaseProcess = context.Process(
                        target=_child, args=(send, folders, folder, *trial)
                    )
                    process.start()
                    send.close()
                    running[started] = (process, receive, folder)
                    started += 1
                ready = wait([conn for _, conn, _ in running.values()])
                for key, (process, conn, folder) in list(running.items()):
                    if conn in ready:
                        done[key] = _received(conn)
                        process.join()
                        folders.remove(folder)
                        del running[key]
            result = done.pop(index)
            if isinstance(result, BaseException):
                raise result  # as raised in the run's process (bad input, say)
            yield point, result
    finally:
        for process, conn, folder in running.values():
            process.kill()
            process.join()
            conn.close()
            folders.remove(folder)


def _received(conn: Connection) -> RunTrace | BaseException:
    try:
        result: RunTrace | BaseException = conn.recv()
    except EOFError:
        result = RuntimeError("a run's process ended without a result")
    conn.close()
    return result


def _child(
    send: Connection,
    folders: Folders,
    folder: Path | None,
    source: str,
    definition: GraphDef,
    run_input: Mapping[str, Any],
    crash_at: int | None,
    approve: bool,
) -> None:
    """A forked process: one run in its own folder, its trace (or what it raised) sent back."""
    try:
        copied = folders.enter(folder, source)
        if copied != source:  # the graph's own files, from the copy
            source, definition = copied, _load(copied)
        send.send(_trial(source, definition, run_input, crash_at, approve))
    except BaseException as exc:  # raised again in the parent
        try:
            send.send(exc)
        except Exception:  # it cannot be pickled: send what it said
            send.send(RuntimeError(f"{type(exc).__name__}: {exc}"))
    send.close()
