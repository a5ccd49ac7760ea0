"""The step loop: readiness, concurrency, run action → fire trigger → commit → emit.

A :class:`Run` owns one run while it holds the run's lease. Each :meth:`Run.next` commits
exactly one step — a node starting, or a node's action result firing a trigger — and
returns its :class:`~phasegraph.model.StepRecord`; it returns ``None`` once the run is
finished or waiting on a human. Actions run as tasks the run owns (up to ``concurrency``
nodes at once); their results are applied one at a time, in a deterministic order when
several finish together, so every transition is committed before the next is computed.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, NamedTuple, Self, cast

from phasegraph import codec
from phasegraph.actions import (
    Action,
    ActionContext,
    ActionResult,
    EventSink,
    ToolCall,
)
from phasegraph.codec import _envelope
from phasegraph.errors import (
    CodecError,
    LeaseLostError,
    RunError,
    RunStateError,
    StoreUnavailableError,
)
from phasegraph.events import EventBus, events_for, live_event
from phasegraph.model import NodeState, NodeStatus, RunState, StepRecord
from phasegraph.run import _collector
from phasegraph.run._lease import Hold
from phasegraph.run._options import Clock, RunOptions
from phasegraph.run._prepare import PreparedGraph
from phasegraph.run._steps import StepBuilder
from phasegraph.run._stored import run_meta
from phasegraph.store.base import Commit, Store

__all__ = ["Run", "check_reply"]

# Waits between attempts after a failed commit; the last one repeats until two leases'
# length has passed (see Run._commit_retrying).
_RETRY_DELAYS: Final = (0.05, 0.1, 0.2, 0.4, 0.8)
# A state the records since its last snapshot outweigh this many times over is written
# again before its interval is up (see Run._checkpoint_due): at most 1/8 more bytes.
_SMALL_STATE: Final = 8


class _Done(NamedTuple):
    """What a finished action task hands back: a result or the error it raised."""

    result: ActionResult | None
    error: BaseException | None
    events: tuple[Mapping[str, Any], ...]


class _Site(NamedTuple):
    """What an action call of one node in one state needs that never changes."""

    action: Action
    where: str
    hook: str
    settings: Mapping[str, Any]
    limits: Mapping[str, int]
    offer: Callable[[Sequence[str]], Sequence[Mapping[str, Any]]]
    bind_tool: Callable[[EventSink], ToolCall]


def _site(prepared: PreparedGraph, node_id: str, path: tuple[str, ...]) -> _Site:
    """Build (and keep, in the prepared graph) the call site of ``node_id`` at ``path``.

    Raises:
        KeyError: No action is bound to the hook of that state.
    """
    machines, tools = prepared.machines, prepared.tools
    definition = prepared.workflow.nodes[node_id]
    where = NodeState(path=path).state
    hook = machines.hook(definition.machine, path) or ""
    site = _Site(
        action=prepared.actions[(node_id, hook)],
        where=where,
        hook=hook,
        settings=definition.settings,
        limits=machines[definition.machine].limits(definition.settings),
        offer=functools.partial(tools.offered, definition, where),
        bind_tool=tools.binder(definition, where),
    )
    prepared.sites[(node_id, path)] = site
    return site


def _encode(record: StepRecord) -> tuple[StepRecord, bytes]:
    return record, codec.encode_record(record)


def check_reply(
    prepared: PreparedGraph,
    state: RunState,
    interrupt_id: str,
    result: ActionResult,
    clock: Clock,
) -> None:
    """Raise what :meth:`Run.reply` would refuse ``result`` with in ``state``; write nothing.

    For a reply handed to the process that drives the run (a worker): checked where it is
    given, it is refused at once, with the error a reply committed there would get.

    Raises:
        RunError: As :meth:`Run.reply` (no such interrupt, an illegal trigger, a budget
            spent, a data conflict).
        CodecError: As :meth:`Run.reply`.
    """
    _reply_step(StepBuilder(prepared, clock), state, interrupt_id, result)


def _reply_step(
    steps: StepBuilder, state: RunState, interrupt_id: str, result: ActionResult
) -> tuple[StepRecord, bytes]:
    """The encoded step answering ``interrupt_id`` with ``result``, or the refusal raised."""
    if not state.interrupts:
        raise RunStateError(
            f"run {state.run_id!r} is not waiting for a reply (status {state.status})",
            run_id=state.run_id,
        )
    return _encode(steps.answer(state, interrupt_id, result))


def _caught(exc: BaseException, events: list[Mapping[str, Any]]) -> _Done:
    """What an action raised, as its outcome; re-raised if it stops more than the action.

    Every action failure is data for the step, not a crash. A cancellation of the task
    awaiting the action (the process or its caller is stopping) and the exceptions that
    are not errors (``KeyboardInterrupt``, ``SystemExit``) go on up. A cancellation
    nobody asked for was raised by the action itself, and so cancels the run.
    """
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise exc
    elif not isinstance(exc, Exception):
        raise exc
    return _Done(None, exc, tuple(events))


class Run:
    """One run, driven step by step while this process holds its lease.

    Use as ``async with Run(...) as run: async for step in run: ...`` (or ``await
    run.drive()`` to go on until the run finishes or waits). Leaving the block
    cancels in-flight actions (their steps were never committed, so a resume runs them
    again) and releases the lease. The lease is ``hold``, kept by its
    :class:`~phasegraph.run.LeaseKeeper`: work under it stops when the keeper cuts it off.
    """

    # Thousands of runs may be in flight in one process: no per-instance dict.
    __slots__ = (
        "__weakref__",
        "_bus",
        "_clock",
        "_counted",
        "_hold",
        "_options",
        "_prepared",
        "_record_bytes",
        "_snapshot_bytes",
        "_snapshot_seq",
        "_snapshots",
        "_state",
        "_steps",
        "_store",
        "_tasks",
        "_to_launch",
        "_uncertain",
        "_waiter",
    )

    def __init__(
        self,
        *,
        prepared: PreparedGraph,
        store: Store,
        hold: Hold,
        state: RunState,
        snapshot_seq: int,
        snapshot_bytes: int,
        snapshots: _envelope.SnapshotCache | None = None,
        options: RunOptions,
        clock: Clock,
        bus: EventBus,
    ) -> None:
        self._prepared = prepared
        self._store = store
        self._hold = hold
        self._state = state
        self._snapshot_seq = snapshot_seq
        # Sizes behind the checkpoint policy (see _checkpoint_due).
        self._snapshot_bytes = snapshot_bytes
        self._record_bytes = 0
        self._options = options
        self._clock = clock
        self._bus = bus
        self._steps = StepBuilder(prepared, clock)
        # Node chunks and list segments of the last snapshot: a checkpoint encodes only
        # what changed since (given when a run is opened from a snapshot with segments).
        self._snapshots = snapshots  # made at the first checkpoint, if not given
        self._tasks: dict[str, asyncio.Task[_Done]] = {}
        # Set by the first action task to finish while _wait_one sleeps.
        self._waiter: asyncio.Future[None] | None = None
        # Nodes in a non-final state whose action is not running yet (all of them on resume).
        self._to_launch = [n for n, s in state.nodes.items() if s.status is NodeStatus.RUNNING]
        self._uncertain: int | None = None  # a commit cut off on its way to the store
        self._counted = False  # counted among the runs in flight (see _collector)

    @property
    def state(self) -> RunState:
        """The run state as of the last committed step."""
        return self._state

    @property
    def run_id(self) -> str:
        """The run id."""
        return self._state.run_id

    async def __aenter__(self) -> Self:
        self._counted = True
        _collector.run_entered()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel in-flight actions, stop renewing and release the lease (idempotent)."""
        if self._counted:
            self._counted = False
            _collector.run_left()
        tasks: list[asyncio.Task[Any]] = [*self._tasks.values()]
        self._tasks.clear()
        if tasks:
            for task in tasks:
                task.cancel()
            # Shielded so that a cancelled caller still leaves nothing running behind it.
            await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
        await self._hold.release()

    def __aiter__(self) -> Self:
        return self

    def __anext__(self) -> Coroutine[Any, Any, StepRecord]:
        # The step itself, not a coroutine awaiting it: one frame less per step in flight.
        return cast("Coroutine[Any, Any, StepRecord]", self._step(stop=True))

    def next(self) -> Coroutine[Any, Any, StepRecord | None]:
        """Commit exactly one step and return it, or ``None`` if nothing more can happen.

        What the step is comes from :meth:`StepBuilder.decide`, which replay asks too.
        (A coroutine to await: ``record = await run.next()``.)

        Raises:
            LeaseLostError: Another holder took the run, or the store did not answer for
                a whole lease: the in-flight actions were stopped.
            StoreError: The commit failed; nothing of this step was written.
        """
        return self._step(stop=False)

    async def drive(self) -> None:
        """Commit steps until nothing more can happen: the run finished or waits.

        What awaiting :meth:`next` until it returns ``None`` does, in one coroutine: the
        lease is guarded once for the whole drive rather than once per step, which is a
        visible share of a small step.

        Raises:
            LeaseLostError: As :meth:`next`.
            StoreError: As :meth:`next`; every step before the failed one is committed.
        """
        task = self._guard(None)
        try:
            while (work := self._next_work()) is not None:
                # A lease cut-off cancels this task, so it ends the drive at this await.
                await work
        except asyncio.CancelledError:
            self._cut_short(task)
            raise
        finally:
            self._hold.leave()

    def _next_work(self) -> Coroutine[Any, Any, StepRecord] | None:
        """The decided step, as a coroutine to await under the lease; ``None`` if none."""
        decided = self._steps.decide(self._state, self._to_launch)
        if decided is None:
            return None
        if isinstance(decided, StepRecord):
            if decided.node in self._to_launch:  # a gate opened (or failed to render)
                self._to_launch.remove(decided.node)
            return self._commit_step(*_encode(decided))
        return self._act_and_commit()

    async def _step(
        self, *, stop: bool, work: Coroutine[Any, Any, StepRecord] | None = None
    ) -> StepRecord | None:
        """:meth:`next`, or ``work`` instead of the decided step, awaited under the lease.

        At the end, raise ``StopAsyncIteration`` if ``stop`` is set.

        The lease is guarded here rather than by a coroutine wrapping the step: a run in
        flight then holds one frame less while its action runs. The keeper cancels the
        task driving the step when it cuts the lease off (see :meth:`Hold.cut_short`),
        which is cheaper than a timeout per step.

        Raises:
            LeaseLostError: The keeper cut the lease off; the step was stopped.
        """
        if work is None:
            work = self._next_work()
            if work is None:
                if stop:
                    raise StopAsyncIteration
                return None
        task = self._guard(work)
        try:
            return await work
        except asyncio.CancelledError:
            self._cut_short(task)
            raise
        finally:
            self._hold.leave()

    async def _leased(self, work: Coroutine[Any, Any, StepRecord]) -> StepRecord:
        """Await ``work`` (a step other than the decided one) while the lease is ours."""
        record = await self._step(stop=False, work=work)
        assert record is not None  # a given step always commits or raises
        return record

    async def _act_and_commit(self) -> StepRecord:
        """Run the due actions and commit the first outcome as a step."""
        if len(self._to_launch) == 1 and not self._tasks:
            # The only thing that can happen next is this action: await it here, in the
            # task driving the run (as _invoke does in a task of its own).
            node_id = self._to_launch.pop()
            events: list[Mapping[str, Any]] = []
            site, ctx = self._context(node_id, events)
            try:
                result = await site.action(ctx)
            except BaseException as exc:
                done = _caught(exc, events)
            else:
                return await self._commit_step(*self._apply(node_id, result, None, tuple(events)))
        else:
            self._launch_actions()
            if not self._tasks:
                raise RunError(
                    f"run {self.run_id!r}: a node is running but no action is due for it",
                    run_id=self.run_id,
                )
            node_id, done = await self._wait_one()
        if isinstance(done.error, asyncio.CancelledError):
            await self._stop_actions()
            reason = f"cancelled by the action of node {node_id!r}"
            return await self._commit_step(*_encode(self._steps.cancel(self._state, reason)))
        return await self._commit_step(*self._apply(node_id, *done))

    async def reply(self, interrupt_id: str, result: ActionResult) -> StepRecord:
        """Answer a pending interrupt: fire ``result.trigger`` on the waiting node.

        Nothing is committed if the reply is refused.

        Raises:
            RunStateError: The run has no such pending interrupt (or is not waiting).
            IllegalTriggerError: The trigger is not legal in the waiting node's state.
            BudgetExhaustedError: The trigger's destination would exceed a budget.
            DataConflictError: The reply's data writes a key the node may not write.
            CodecError: The reply's data cannot be stored.
        """
        step = _reply_step(self._steps, self._state, interrupt_id, result)
        return await self._leased(self._commit_step(*step))

    async def cancel(self, reason: str = "cancelled by request") -> StepRecord:
        """Stop in-flight actions and commit the run as cancelled.

        Raises:
            RunStateError: The run already finished.
        """
        if self._state.status.terminal:
            raise RunStateError(
                f"run {self.run_id!r} already {self._state.status}; nothing to cancel",
                run_id=self.run_id,
            )
        return await self._leased(self._cancel(reason))

    async def _cancel(self, reason: str) -> StepRecord:
        await self._stop_actions()
        return await self._commit_step(*_encode(self._steps.cancel(self._state, reason)))

    async def _stop_actions(self) -> None:
        """Cancel the in-flight actions and forget the due ones: their results are dropped."""
        tasks: list[asyncio.Task[Any]] = [*self._tasks.values()]
        self._tasks.clear()
        self._to_launch.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- actions -----------------------------------------------------------------------

    def _call(self, node_id: str) -> tuple[Action, ActionContext, list[Mapping[str, Any]]]:
        events: list[Mapping[str, Any]] = []
        site, ctx = self._context(node_id, events)
        return site.action, ctx, events

    def _launch_actions(self) -> None:
        while self._to_launch:
            node_id = self._to_launch.pop(0)
            task = asyncio.create_task(
                self._invoke(*self._call(node_id)), name=f"phasegraph:{self.run_id}:{node_id}"
            )
            task.add_done_callback(self._wake)
            self._tasks[node_id] = task

    def _wake(self, _: asyncio.Task[_Done] | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _context(
        self, node_id: str, events: list[Mapping[str, Any]]
    ) -> tuple[_Site, ActionContext]:
        """The context for the action bound to the node's current state."""
        state = self._state
        node = state.nodes[node_id]
        site = self._prepared.sites.get((node_id, node.path))
        if site is None:
            site = _site(self._prepared, node_id, node.path)

        def emit(kind: str, fields: Mapping[str, Any]) -> None:
            events.append({**fields, "kind": kind})

        return site, ActionContext(
            run_id=state.run_id,
            node_id=node_id,
            state=site.where,
            hook=site.hook,
            input=state.input,
            data=state.data,
            settings=site.settings,
            counters=node.counters,
            limits=site.limits,
            steps=node.steps,
            payload=node.payload,
            emit=emit,
            tool=site.bind_tool(emit),
            offer=site.offer,
            # Bound per call rather than cached per node: no extra map on every run in flight.
            stream=functools.partial(self._stream, node_id),
            attempt=self._hold.lease.token,
        )

    def _stream(self, node_id: str, kind: str, fields: Mapping[str, Any]) -> None:
        """Publish a live event of an action now; it is never committed (see live_event)."""
        if self._bus.listening:
            self._bus.publish(live_event(self._state, node_id, kind, fields))

    @staticmethod
    async def _invoke(action: Action, ctx: ActionContext, events: list[Mapping[str, Any]]) -> _Done:
        try:
            return _Done(await action(ctx), None, tuple(events))
        except BaseException as exc:
            return _caught(exc, events)

    async def _wait_one(self) -> tuple[str, _Done]:
        """Wait for action tasks to finish and take one (as ``asyncio.wait``, minus its setup).

        Like ``asyncio.wait``, this always lets the loop run before looking, even when a
        task is already done, so tasks finishing in the same turn are taken together.
        """
        loop = asyncio.get_running_loop()
        finished: list[str] = []
        while not finished:
            self._waiter = waiter = loop.create_future()
            if any(task.done() for task in self._tasks.values()):
                loop.call_soon(self._wake, None)
            try:
                await waiter
            finally:
                self._waiter = None
            # A wake-up may be stale (from a task already taken), so look before returning.
            finished = [node_id for node_id, task in self._tasks.items() if task.done()]
        # Several may finish together: take them in graph order so replays agree.
        node_id = min(finished, key=self._prepared.workflow.position.__getitem__)
        return node_id, self._tasks.pop(node_id).result()

    def _apply(
        self,
        node_id: str,
        result: ActionResult | None,
        error: BaseException | None,
        events: tuple[Mapping[str, Any], ...],
    ) -> tuple[StepRecord, bytes]:
        """Turn an action's outcome into an encoded record; any refusal fails the node."""
        steps, state = self._steps, self._state
        if error is not None or not isinstance(result, ActionResult):
            kind = type(result).__name__
            error = error or RunError(f"action returned {kind}, not an ActionResult")
            return _encode(steps.action_failed(state, node_id, error, events))
        try:
            record = steps.transition(state, node_id, result, events)
            return record, codec.encode_record(record)
        except CodecError:
            # Name the offending key: nothing of this result is committed.
            try:
                for part in (result.data, result.payload, result.output):
                    _envelope.check_encodable(part, node_id=node_id)
                raise
            except CodecError as exc:
                # Only the trigger is kept: the rest of this result cannot be stored.
                refused = ActionResult(trigger=result.trigger)
                return _encode(steps.node_failed(state, node_id, exc, (), refused))
        except RunError as exc:
            return _encode(steps.node_failed(state, node_id, exc, (), result))

    # -- persistence -------------------------------------------------------------------

    async def _commit_step(self, record: StepRecord, blob: bytes) -> StepRecord:
        """Commit the step, then make it the run's state (and queue its node's next action)."""
        state = self._steps.apply(self._state, record)
        snapshot = None
        self._record_bytes += len(blob)
        if self._checkpoint_due(record.seq):
            if self._snapshots is None:
                self._snapshots = _envelope.SnapshotCache()
            snapshot = codec.encode_snapshot(state, self._snapshots)
        commit = Commit(seq=record.seq, record=blob, snapshot=snapshot, meta=run_meta(state))
        try:
            try:
                await self._store.commit(self._hold.lease, commit)
            except StoreUnavailableError:
                await self._commit_retrying(commit)
            except asyncio.CancelledError:
                self._uncertain = commit.seq  # cut off mid-commit: it may have landed
                raise
        except LeaseLostError as exc:
            self._hold.taken(exc)
            raise self._hold.error(self._state.seq) from exc
        except StoreUnavailableError as exc:
            raise StoreUnavailableError(
                f"run {self.run_id!r} stopped at step {self._state.seq}, its last committed "
                f"step: {exc}; continue it with 'phasegraph resume {self.run_id}'",
                run_id=self.run_id,
                seq=self._state.seq,
            ) from exc
        self._committed(record, state, snapshot)
        return record

    def _committed(self, record: StepRecord, state: RunState, snapshot: bytes | None) -> None:
        """Make the committed step's state the run's (and queue its node's next action)."""
        previous = self._state.status
        self._state = state
        if snapshot is not None:
            assert self._snapshots is not None  # made by the checkpoint that wrote it
            self._snapshots.accept(record.seq)
            # The size of the state it stands for, segments it refers to included: what
            # a read decodes, and what the checkpoint policy weighs records against.
            self._snapshot_bytes = len(snapshot) + self._snapshots.referred
            self._snapshot_seq, self._record_bytes = record.seq, 0
        # Emitted only after the commit: an event never describes an uncommitted step.
        if self._bus.listening:
            for event in events_for(state.run_id, record, previous):
                self._bus.publish(event)
        node = record.node
        if node is not None:
            # The record holds the node's new state (the run state's map is slower to read).
            moved = record.nodes.get(node) or state.nodes[node]
            if moved.status is NodeStatus.RUNNING:
                self._to_launch.append(node)

    def _checkpoint_due(self, seq: int) -> bool:
        """Whether this step also writes a full snapshot.

        Every ``checkpoint_every`` steps, once the records written since the last snapshot
        add up to half its size (so a large, unchanging state is not rewritten every few
        steps), but never more than eight intervals apart (which bounds how many records
        a read must apply).

        A small state is written sooner: once the records since its last snapshot add up
        to :data:`_SMALL_STATE` times its size, but not before an eighth of an interval.
        Reading the head decodes the snapshot and every record since (what ``Engine.get``
        and every resume pay); for a state smaller than a few records, writing it again
        costs less than what the reads pay for the records, and adds at most an eighth
        to the bytes written. A run of tiny steps is read in a dozen records, not 63.
        """
        since = seq - self._snapshot_seq
        every = self._options.checkpoint_every
        if since >= every:
            return self._record_bytes * 2 >= self._snapshot_bytes or since >= 8 * every
        small = self._record_bytes >= _SMALL_STATE * self._snapshot_bytes
        return small and since >= max(every // 8, 1)

    async def _commit_retrying(self, commit: Commit) -> None:
        """Commit again after a failure; an unreachable store is retried for two leases.

        Commits are idempotent (one found already written succeeds), so a retry after a
        lost reply is safe. A store blip costs a pause, not the run; once the store has
        been silent for a whole lease, the keeper's cut-off stops the wait.
        """
        loop = asyncio.get_running_loop()
        # Past the keeper's own cut-off (a lease without an answer), which ends this wait
        # first when the store is away: this bound is for a store that renews but
        # cannot commit.
        give_up = loop.time() + 2 * self._hold.lease.ttl
        for attempt in itertools.count():
            await asyncio.sleep(_RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)])
            try:
                await self._store.commit(self._hold.lease, commit)
                return
            except asyncio.CancelledError:
                self._uncertain = commit.seq  # cut off mid-commit: it may have landed
                raise
            except StoreUnavailableError:
                if loop.time() >= give_up:
                    raise

    # -- the lease ---------------------------------------------------------------------

    def _guard(self, work: Coroutine[Any, Any, StepRecord] | None) -> asyncio.Task[Any] | None:
        """Before awaiting a step under the lease: the task driving it.

        Raises:
            LeaseLostError: The lease is gone already (``work`` is closed unstarted).
        """
        if self._hold.lost:
            if work is not None:
                work.close()
            raise self._hold.error(self._state.seq)
        task = asyncio.current_task()
        self._hold.enter(task)
        return task

    def _cut_short(self, task: asyncio.Task[Any] | None) -> None:
        """On a cancellation of work under the lease: raise if the keeper's cut-off did it.

        Raises:
            LeaseLostError: The keeper cut the work off (and nobody else cancelled it).
        """
        self._hold.cut_short(task, self._state.seq, self._uncertain)
