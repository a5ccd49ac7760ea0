"""The step loop: readiness, concurrency, run action → fire trigger → commit → emit.

A :class:`Run` owns one run while it holds the run's lease. Each :meth:`Run.next` commits
one step — a node starting, or a node's action result firing a trigger — and returns its
:class:`~phasegraph.model.StepRecord`; it returns ``None`` once the run is finished or
waiting on a human. Actions run as tasks the run owns (up to ``concurrency`` nodes at
once); their results are applied one at a time, in a deterministic order when several
finish together, so every transition is committed before the next is computed. While an
action runs, it may commit ledger steps of its own (an effect's intent, a tool call's
result: ``ctx.record_effect``), which move no node; a lock keeps each step built from
the state it is committed on.

The loop itself is :meth:`Run._advance`; everything else here is plain.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, NamedTuple, Self, TypeVar

from phasegraph import codec
from phasegraph.actions import (
    Action,
    ActionContext,
    ActionResult,
    EventSink,
    ToolCall,
)
from phasegraph.actions._effects import ACTION_INDEX, EffectPolicy
from phasegraph.actions._python import coerce_result
from phasegraph.errors import (
    CodecError,
    LeaseLostError,
    RunError,
    RunStateError,
    SpendRefusedError,
    StoreUnavailableError,
)
from phasegraph.events import events_for
from phasegraph.model import (
    Actor,
    BusyPolicy,
    Effect,
    LedgerEntry,
    NodeState,
    NodeStatus,
    OnUnknown,
    RunState,
    StepRecord,
    Value,
    replace,
)
from phasegraph.run._checkpoint import Checkpoints
from phasegraph.run._gates import GateNotOpen, refused_reply
from phasegraph.run._inbox import (
    MESSAGE_EVENT,
    Target,
    decode_message,
    message_target,
    taken_by,
)
from phasegraph.run._lease import Hold
from phasegraph.run._options import Clock, RunEnvironment
from phasegraph.run._prepare import PreparedGraph
from phasegraph.run._spend import price, reserve
from phasegraph.run._steps import StepBuilder
from phasegraph.run._stored import decode_history, load, run_meta
from phasegraph.store.base import Commit, Message

__all__ = ["Run", "check_reply"]

T = TypeVar("T")

# An enum member read from its class costs a property call (Python 3.11): read once here.
_ONCE: Final = Effect.ONCE
_RUNNING: Final = NodeStatus.RUNNING
_CUTTING: Final = frozenset({BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK})
_ROLLBACK_WINDOW: Final = 64  # records read at a time, newest first, for where a turn began


def _gate_taking(record: StepRecord) -> str | None:
    """The gate ``record`` delivered a message to, if it is such a step."""
    if record.kind != "reply" or taken_by(record) is None:
        return None
    return next((str(e["id"]) for e in record.events if MESSAGE_EVENT in e and "id" in e), None)


# Waits between attempts after a failed commit; the last one repeats until two leases'
# length has passed (see Run._store_commit).
_RETRY_DELAYS: Final = (0.05, 0.1, 0.2, 0.4, 0.8)


class _Outcome(Value, frozen=True, kw_only=True, gc=True):  # may hold anything
    """What a finished action task hands back: a result or the error it raised.

    A value (built in C) rather than a named tuple, whose ``__new__`` is a Python call:
    one outcome is built per step.
    """

    result: ActionResult | None
    error: BaseException | None = None
    events: tuple[Mapping[str, Any], ...] = ()


class _Site(NamedTuple):
    """What an action call of one node in one state needs that never changes."""

    action: Action
    where: str
    hook: str
    settings: Mapping[str, Any]
    limits: Mapping[str, int]
    offer: Callable[[RunState, Sequence[str]], Awaitable[Sequence[Mapping[str, Any]]]]
    bind_tool: Callable[[EventSink, RunState], ToolCall]
    policy: EffectPolicy
    item: Any
    retry: bool


def _site(prepared: PreparedGraph, node_id: str, path: tuple[str, ...]) -> _Site:
    """Build (and keep, in the prepared graph) the call site of ``node_id`` at ``path``.

    Raises:
        KeyError: No action is bound to the hook of that state.
    """
    machines, tools = prepared.machines, prepared.tools
    definition = prepared.workflow.nodes[node_id]
    where = NodeState(path=path).state
    hook = machines.hook(definition.machine, path) or ""
    action = prepared.actions[(node_id, hook)]
    policy = prepared.effects.get((node_id, hook)) or EffectPolicy()
    site = _Site(
        action=action,
        where=where,
        hook=hook,
        settings=definition.settings,
        limits=machines[definition.machine].limits(definition.settings),
        offer=functools.partial(tools.offered, definition, where),
        bind_tool=tools.binder(definition, where),
        policy=policy,
        item=definition.item,
        retry=machines.retries(definition.machine, path) is not None,
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
    *,
    actor: Actor | None = None,
    step: int | None = None,
    trusted: bool = False,
) -> None:
    """Raise what :meth:`Run.reply` would refuse ``result`` with in ``state``; write nothing.

    For a reply handed to the process that drives the run (a worker): checked where it is
    given, it is refused at once, with the error a reply committed there would get.

    Raises:
        RunError: As :meth:`Run.reply` (no such interrupt, an illegal trigger, a budget
            spent, a data conflict, a reviewer refused, a stale step), except that a
            reply to a gate answered already is not told apart (no history is read).
        CodecError: As :meth:`Run.reply`.
    """
    steps = StepBuilder(prepared, clock, state.plans)
    _reply_step(steps, state, interrupt_id, result, _Answer(actor, step, trusted))


def _reply_step(
    steps: StepBuilder,
    state: RunState,
    interrupt_id: str,
    result: ActionResult,
    who: _Answer,
) -> tuple[StepRecord, bytes]:
    """The encoded step answering ``interrupt_id`` with ``result``, or the refusal raised."""
    if not state.interrupts:
        raise GateNotOpen(
            f"run {state.run_id!r} is not waiting for a reply (status {state.status})",
            run_id=state.run_id,
        )
    record = steps.answer(
        state, interrupt_id, result, actor=who.actor, step=who.step, trusted=who.trusted
    )
    return _encode(record)


class _Answer(NamedTuple):
    """Who answers a gate, and which opening of it (see :meth:`Run.reply`)."""

    actor: Actor | None
    step: int | None
    trusted: bool


async def _invoke(action: Action, ctx: ActionContext, events: list[Mapping[str, Any]]) -> _Outcome:
    """Run an action (in a task of its own) and hand back its outcome.

    Every action failure is data for the step, not a crash. A cancellation of this task
    (the run is stopping its actions) and the exceptions that are not errors
    (``KeyboardInterrupt``, ``SystemExit``) go on up. A cancellation nobody asked for was
    raised by the action itself, and so cancels the run.
    """
    try:
        return _Outcome(result=await action(ctx), events=(*events,))
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        return _Outcome(result=None, error=exc, events=(*events,))
    except Exception as exc:
        return _Outcome(result=None, error=exc, events=(*events,))


class Run:
    """One run, driven step by step while this process holds its lease.

    Use as ``async with Run(...) as run: async for step in run: ...`` (or ``await
    run.drive()`` to go on until the run finishes or waits). Leaving the block
    cancels in-flight actions (their steps were never committed, so a resume runs them
    again) and releases the lease. The lease is ``hold``, kept by its
    :class:`~phasegraph.run.LeaseKeeper`: work under it stops when the keeper cuts it off.

    Args:
        prepared: The graph the run follows.
        hold: The run's lease, taken by whoever opened or created the run.
        state: The run state as of its last committed step.
        checkpoints: Where the run's last full snapshot stands (see
            :class:`~phasegraph.run.CheckpointPolicy`).
        env: What the engine gives every run: store, clock and event bus.
    """

    # Thousands of runs may be in flight in one process: no per-instance dict.
    __slots__ = (
        "__weakref__",
        "_bus",
        "_checkpoints",
        "_eager",
        "_hold",
        "_inbox",
        "_lock",
        "_looked",
        "_state",
        "_steps",
        "_store",
        "_streams",
        "_takes",
        "_tasks",
        "_to_launch",
        "_uncertain",
    )

    def __init__(
        self,
        *,
        prepared: PreparedGraph,
        hold: Hold,
        state: RunState,
        checkpoints: Checkpoints,
        env: RunEnvironment,
    ) -> None:
        self._hold = hold
        self._state = state
        self._checkpoints = checkpoints
        self._store = env.store
        self._bus = env.bus
        self._streams = env.streams
        self._steps = StepBuilder(prepared, env.clock, state.plans)
        self._tasks: dict[str, asyncio.Task[_Outcome]] = {}
        # Nodes in a non-final state whose action is not running yet (all of them on resume).
        self._to_launch = [n for n, s in state.nodes.items() if s.status is NodeStatus.RUNNING]
        self._uncertain: int | None = None  # a commit cut off on its way to the store
        # Actions in tasks of their own commit ledger entries while the loop commits steps:
        # while any is in flight, each step is built from the run state and committed
        # under this lock.
        self._lock = asyncio.Lock()
        # A graph that takes messages looks at the run's inbox when told to (opened, mail
        # came) and once at each idle step; one whose policy can cut a busy node short
        # looks at every step (a message may arrive from another process).
        self._looked = -1  # the seq at which the inbox was last looked at
        self._read_busy(prepared)

    def _read_busy(self, prepared: PreparedGraph) -> None:
        """Whether runs of ``prepared`` take messages, and look for them at every step."""
        busy = prepared.definition.busy
        self._takes = self._inbox = busy is not None
        self._eager = busy is not None and (
            busy.policy in _CUTTING or any(g.busy in _CUTTING for g in prepared.gates.values())
        )

    @property
    def state(self) -> RunState:
        """The run state as of the last committed step."""
        return self._state

    @property
    def _prepared(self) -> PreparedGraph:
        """The graph the run follows, with the children of its plans so far."""
        return self._steps.prepared

    @property
    def run_id(self) -> str:
        """The run id."""
        return self._state.run_id

    async def __aenter__(self) -> Self:
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
        if self._tasks:
            # Shielded so that a cancelled caller still leaves nothing running behind it.
            await asyncio.shield(self._stop_actions())
        tools = self._prepared.tools
        if tools.has_servers:  # most graphs have none: no task to shield
            await asyncio.shield(tools.close_run(self.run_id))
        self._streams.forget(self.run_id)  # a turn cut off here runs again under a new lease
        await self._hold.release()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StepRecord:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record

    async def next(self) -> StepRecord | None:
        """Commit one step and return it, or ``None`` if nothing more can happen.

        What the step is comes from :meth:`StepBuilder.decide`, which replay asks too.
        An action that ran for it may have committed ledger steps first (not returned).

        Raises:
            LeaseLostError: Another holder took the run, or the store did not answer for
                a whole lease: the in-flight actions were stopped.
            StoreError: The commit failed; nothing of this step was written.
        """
        return await self._leased(self._advance(once=True))

    async def drive(self) -> None:
        """Commit steps until nothing more can happen: the run finished or waits.

        Raises:
            LeaseLostError: As :meth:`next`.
            StoreError: As :meth:`next`; every step before the failed one is committed.
        """
        await self._leased(self._advance(once=False))

    async def reply(
        self,
        interrupt_id: str,
        result: ActionResult,
        *,
        actor: Actor | None = None,
        step: int | None = None,
        trusted: bool = False,
    ) -> StepRecord:
        """Answer a pending interrupt: fire ``result.trigger`` on the waiting node.

        Nothing is committed if the reply is refused.

        Args:
            interrupt_id: The gate answered.
            result: The reply.
            actor: Who answers, recorded on the step (``None``: a trusted local caller,
                whom a gate's reviewers do not restrict).
            step: The step that opened the gate, as the answerer saw it (see
                :attr:`~phasegraph.model.Interrupt.seq`); ``None``: the pending opening.
            trusted: The caller is local and trusted (the CLI on the store's machine):
                the gate's reviewers do not restrict ``actor``, who is still recorded.

        Raises:
            GateAnsweredError: That opening of the gate was answered already.
            StaleReplyError: The quoted step is not the pending opening's.
            NotAReviewerError: ``actor`` is not among the gate's reviewers.
            RunStateError: The run has no such pending interrupt (or is not waiting).
            IllegalTriggerError: The trigger is not legal in the waiting node's state.
            BudgetExhaustedError: The trigger's destination would exceed a budget.
            DataConflictError: The reply's data writes a key the node may not write.
            CodecError: The reply's data cannot be stored.
        """
        who = _Answer(actor, step, trusted)
        return await self._leased(self._reply(interrupt_id, result, who))

    async def migrate(
        self,
        prepared: PreparedGraph,
        result: Mapping[str, Any],
        *,
        nodes: Mapping[str, NodeState] | None = None,
        renamed: Mapping[str, str] | None = None,
        actor: Actor | None = None,
    ) -> StepRecord:
        """Commit a ``migrate`` step, after which the run follows ``prepared``.

        Call it before the run takes a step in this process (nothing of it in flight).

        Args:
            prepared: The definition the run moves to (checked by the caller, see
                :func:`~phasegraph.run._migrate.fit`).
            result: The step's result (:func:`~phasegraph.run._migrate.pinned`).
            nodes: The nodes the move renames, moves to another state or adds.
            renamed: Old node id → new id.
            actor: Who moves the run.
        """
        return await self._leased(
            self._migrate(prepared, result, nodes or {}, renamed or {}, actor)
        )

    async def _migrate(
        self,
        prepared: PreparedGraph,
        result: Mapping[str, Any],
        nodes: Mapping[str, NodeState],
        renamed: Mapping[str, str],
        actor: Actor | None,
    ) -> StepRecord:
        async with self._lock:
            state = self._state
            record = self._steps.migrate(state, result, nodes, actor)
            self._steps = self._steps.moved_to(prepared, state.plans)
            self._read_busy(prepared)
            self._to_launch = [renamed.get(node, node) for node in self._to_launch]
            return await self._commit(*_encode(record))

    async def cancel(
        self, reason: str = "cancelled by request", *, actor: Actor | None = None
    ) -> StepRecord:
        """Stop in-flight actions and commit the run as cancelled (by ``actor``, if named).

        Raises:
            RunStateError: The run already finished.
        """
        if self._state.status.terminal:
            raise RunStateError(
                f"run {self.run_id!r} already {self._state.status}; nothing to cancel",
                run_id=self.run_id,
            )
        return await self._leased(self._cancel(reason, actor))

    def expect_message(self) -> None:
        """A message may have come: look at the inbox at the next step boundary."""
        self._inbox = self._takes

    async def message_cuts_in(self) -> bool:
        """Whether a message waits that a busy node takes now, its action to be cut short.

        True under ``interrupt`` and ``rollback`` when a running node's state accepts the
        message trigger and the inbox holds a message: the caller stops the action in
        flight (as for a cancel) and the next step delivers the message.
        """
        target = message_target(self._prepared, self._state)
        if target is None or target.gate is not None:
            return False
        return bool(await self._store.messages(self.run_id, limit=1))

    async def settle_messages(self) -> None:
        """Mark the inbox's first message taken if the run's last step took it.

        A message is taken after the step that delivers it is committed; a process that
        stopped in between left its cursor behind, and the run must not take it twice.
        Call it when the run is opened, before it takes a step.
        """
        if self._prepared.definition.busy is None:
            return
        pending = await self._store.messages(self.run_id, limit=1)
        if pending and await self._took_last(pending[0]):
            await self._store.take_messages(self.run_id, pending[0].position)

    async def _took_last(self, message: Message) -> bool:
        """Whether the run's head step delivered ``message``."""
        seq = self._state.seq
        stored = [item async for item in self._store.history(self.run_id, start=seq)]
        return any(taken_by(r) == message.id for r in decode_history(self.run_id, stored, seq))

    # -- the step loop -----------------------------------------------------------------

    async def _advance(self, *, once: bool) -> StepRecord | None:
        """The step loop: decide, act, commit; one step if ``once``, else until idle.

        Returns the last step committed (``None`` once nothing more can happen).

        This is the one place of the interpreter where speed shaped the code; why:

        * What happens next is asked of :meth:`StepBuilder.decide` every turn, the one
          order of decisions that replay asks too, so the two cannot disagree.
        * ``_to_launch`` lists the running nodes whose action has not started, in the
          order they became due: ``decide`` reads it for the human gates, and only
          :meth:`_committed` appends to it, from the committed record itself.
        * An action is always run by :func:`_invoke`. When it is the only thing that can
          happen next (one action due, none in flight: every step of a sequential
          graph), it is awaited right here, in the task driving the run; otherwise
          each due action gets a task of its own and the first to finish is taken
          (:meth:`_first_outcome`). A task per action would cost two more turns of the
          event loop per step — a third of a small step's instructions — and the
          outcome is the same: nothing else could have been committed meanwhile.
        * A drive is one call of this loop under one lease guard (:meth:`_leased`), not
          a guard per step.
        """
        if self._takes:
            return await self._advance_with_inbox(once=once)
        return await self._step_loop(once=once)

    async def _step_loop(self, *, once: bool) -> StepRecord | None:
        """:meth:`_advance`'s loop itself (see there)."""
        record: StepRecord | None = None
        lock = self._lock
        while True:
            # Only an action in a task of its own can commit beside this loop (a ledger
            # step): with none in flight, no lock is needed (and none is paid for).
            guarded = bool(self._tasks)
            if guarded:
                await lock.acquire()
            try:
                decided = self._steps.decide(self._state, self._to_launch)
                if decided is None:
                    return None
                if isinstance(decided, StepRecord):
                    if decided.node in self._to_launch:  # a gate opened (or failed to render)
                        self._to_launch.remove(decided.node)
                    record = await self._commit(*_encode(decided))
            finally:
                if guarded:
                    lock.release()
            if not isinstance(decided, StepRecord):
                if len(self._to_launch) == 1 and not self._tasks:
                    node_id = self._to_launch.pop()
                    outcome = await _invoke(*self._call(node_id))
                else:
                    node_id, outcome = await self._first_outcome()
                record = await self._commit_outcome(node_id, outcome)
            if once:
                return record

    async def _advance_with_inbox(self, *, once: bool) -> StepRecord | None:
        """The step loop of a graph that takes messages: the inbox looked at between steps.

        It is looked at when told to (the run was opened, mail came), once at each step
        where the run is idle (a gate may take a message), and at every step when a
        message may cut a busy node short (``interrupt``, ``rollback``).
        """
        while True:
            due = self._inbox or (self._eager and self._looked != self._state.seq)
            record = await self._take_message() if due else None
            if record is None:
                record = await self._step_loop(once=True)
            if record is None:
                if self._looked == self._state.seq:
                    return None
                self._inbox = True  # idle: a message may be waiting for a gate
                continue
            if once:
                return record

    async def _commit_outcome(self, node_id: str, outcome: _Outcome) -> StepRecord:
        """Commit the step an action's outcome makes, built from the state it lands on."""
        if not self._tasks:
            return await self._commit(*await self._outcome_step(node_id, outcome))
        async with self._lock:  # an action still in flight may be committing a ledger step
            return await self._commit(*await self._outcome_step(node_id, outcome))

    async def _leased(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` while the lease is ours.

        The keeper cancels the task doing the work when it cuts the lease off (see
        :meth:`Hold.cut_short`), which is cheaper than a timeout per step.

        Raises:
            LeaseLostError: The lease is gone already (``work`` is closed unstarted), or
                the keeper cut it off while the work went on.
        """
        hold = self._hold
        if hold.lost:
            work.close()
            raise hold.error(self._state.seq)
        task = asyncio.current_task()
        hold.enter(task)
        try:
            return await work
        except asyncio.CancelledError:
            hold.cut_short(task, self._state.seq, self._uncertain)
            raise
        finally:
            hold.leave()

    async def _take_message(self) -> StepRecord | None:
        """Deliver the inbox's next message where the machine accepts it now, if anywhere.

        The message is marked taken once its step is committed (see
        :meth:`settle_messages` for a process that stops in between).
        """
        self._inbox = False
        self._looked = self._state.seq
        if message_target(self._prepared, self._state) is None:
            return None
        pending = await self._store.messages(self.run_id, limit=1)
        if not pending:
            return None
        message = pending[0]
        async with self._lock:
            target = message_target(self._prepared, self._state)  # it may have moved since
            if target is None:
                return None
            try:
                step = await self._message_step(target, message)
            except (RunError, CodecError):
                # Refused where it was to be taken (a budget spent, say): it is taken all
                # the same, so that the messages after it are not held up behind it.
                await self._store.take_messages(self.run_id, message.position)
                raise
            record = await self._commit(*step)
        await self._store.take_messages(self.run_id, message.position)
        return record

    async def _message_step(self, target: Target, message: Message) -> tuple[StepRecord, bytes]:
        """The step delivering ``message`` to ``target`` (a busy node's action is stopped)."""
        busy = self._prepared.definition.busy
        assert busy is not None  # a target exists only for a graph that takes messages
        result = ActionResult(trigger=busy.trigger, payload=decode_message(message.body))
        taken = {"id": message.id, "position": message.position}
        state = self._state
        if target.gate is not None:
            record = self._steps.answer(state, target.gate, result, trusted=True, message=taken)
            return _encode(record)
        await self._stop_node(target.node)
        if target.policy is BusyPolicy.ROLLBACK:
            back = await self._turn_began(target.node)
            if back is not None:  # discard the turn: back to the gate that began it
                gate, before, keys = back
                rolled = self._steps.rollback(state, target.node, before, gate, keys)
                await self._commit(*_encode(rolled))
                record = self._steps.answer(self._state, gate, result, trusted=True, message=taken)
                return _encode(record)
        event = {
            "kind": MESSAGE_EVENT,
            "trigger": busy.trigger,
            "payload": dict(result.payload),
            MESSAGE_EVENT: taken,
            "policy": str(target.policy),
        }
        record = self._steps.transition(state, target.node, result, (event,), kind="reply")
        return _encode(record)

    async def _turn_began(self, node_id: str) -> tuple[str, RunState, set[str]] | None:
        """Where the node's turn began, read from the newest step back.

        Returns:
            The gate that took the node's last message, the run just before that step,
            and the data keys the node wrote since; ``None`` if it took none at a gate.
        """
        keys: set[str] = set()
        stop = self._state.seq + 1
        while stop > 0:
            start = max(0, stop - _ROLLBACK_WINDOW)
            stored = self._store.history(self.run_id, start=start, stop=stop)
            records = decode_history(self.run_id, [item async for item in stored], start)
            for record in reversed(records):
                if record.node != node_id:
                    continue
                keys |= {*record.data, *record.appended}
                gate = _gate_taking(record)
                if gate is not None:
                    before = await load(self._store, self.run_id, record.seq - 1)
                    return gate, before.state, keys
            stop = start
        return None

    async def _stop_node(self, node_id: str) -> None:
        """Cut the node's action short, or forget it if it has not started."""
        if node_id in self._to_launch:
            self._to_launch.remove(node_id)
        task = self._tasks.pop(node_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _reply(self, interrupt_id: str, result: ActionResult, who: _Answer) -> StepRecord:
        async with self._lock:
            state = self._state
            try:
                answer = _reply_step(self._steps, state, interrupt_id, result, who)
            except RunStateError as exc:
                raise await refused_reply(self._store, state, interrupt_id, who.step, exc) from None
            return await self._commit(*answer)

    async def _cancel(self, reason: str, actor: Actor | None) -> StepRecord:
        async with self._lock:
            await self._stop_actions()
            return await self._commit(*_encode(self._steps.cancel(self._state, reason, actor)))

    # -- actions -----------------------------------------------------------------------

    async def _first_outcome(self) -> tuple[str, _Outcome]:
        """Start each due action in a task, wait for one to finish: its node and outcome.

        Raises:
            RunError: A node is running but none of its actions is due or in flight.
        """
        while self._to_launch:
            node_id = self._to_launch.pop(0)
            self._tasks[node_id] = asyncio.create_task(
                _invoke(*self._call(node_id)), name=f"phasegraph:{self.run_id}:{node_id}"
            )
        if not self._tasks:
            raise RunError(
                f"run {self.run_id!r}: a node is running but no action is due for it",
                run_id=self.run_id,
            )
        await asyncio.wait(self._tasks.values(), return_when=asyncio.FIRST_COMPLETED)
        # Several may finish together: take them in graph order so replays agree.
        position = self._prepared.workflow.position
        finished = (node_id for node_id, task in self._tasks.items() if task.done())
        node_id = min(finished, key=position.__getitem__)
        return node_id, self._tasks.pop(node_id).result()

    async def _stop_actions(self) -> None:
        """Cancel the in-flight actions and forget the due ones: their results are dropped."""
        tasks = [*self._tasks.values()]
        self._tasks.clear()
        self._to_launch.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _call(self, node_id: str) -> tuple[Action, ActionContext, list[Mapping[str, Any]]]:
        """What :func:`_invoke` needs to run the action of the node's current state."""
        events: list[Mapping[str, Any]] = []
        state = self._state
        node = state.nodes[node_id]
        site = self._prepared.sites.get((node_id, node.path))
        if site is None:
            site = _site(self._prepared, node_id, node.path)

        def emit(kind: str, fields: Mapping[str, Any]) -> None:
            events.append({**fields, "kind": kind})

        bind_tool = site.bind_tool

        def tool(name: str, /, **arguments: Any) -> Awaitable[Mapping[str, Any]]:
            # Bound on each use: most actions call no tool, so most steps bind none.
            return bind_tool(emit, state)(name, **arguments)

        context = ActionContext(
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
            tool=tool,
            offer=functools.partial(site.offer, state),
            # Bound per call rather than cached per node: no extra map on every run in flight.
            stream=functools.partial(self._stream, node_id),
            attempt=self._hold.lease.token,
            ledger=node.ledger,
            # A retry makes the retried call again: the same effect ids (Idempotency-Key).
            call_step=node.retried if site.retry else None,
            effect_sink=self._record_effect,  # the node is the context's: no partial per call
            tool_effect=self._prepared.tools.effect,
            item=site.item,
            price=self._price,
            history_reader=self._node_history,
        )
        budget = self._prepared.definition.budget
        if budget is not None and budget.finite:  # only then does a call reserve
            context = replace(context, spend_sink=self._reserve)
        if site.policy.effect is _ONCE:
            return functools.partial(self._once, site), context, events
        return site.action, context, events

    async def _node_history(self, node_id: str) -> list[StepRecord]:
        """The node's committed step records, oldest first (``ctx.history``)."""
        run_id = self._state.run_id
        stored = await self._store.history_list(run_id, stop=self._state.seq + 1)
        return [record for record in decode_history(run_id, stored) if record.node == node_id]

    async def _record_effect(self, node_id: str, entry: LedgerEntry) -> None:
        """Commit a ledger entry of the node's step in flight (the node does not move).

        Raises:
            LeaseLostError: As :meth:`_commit`; the action fails with it.
        """
        if not self._tasks:  # the action was awaited by the loop itself: nothing else commits
            await self._commit(*_encode(self._steps.ledger_step(self._state, node_id, entry)))
            return
        async with self._lock:
            await self._commit(*_encode(self._steps.ledger_step(self._state, node_id, entry)))

    def _price(self, models: Sequence[str], prompt: int, completion: int) -> Mapping[str, int]:
        """What a model call spent: its tokens, and its cost when its model has a price."""
        cost = price(self._prepared.definition.budget, models, prompt, completion)
        spend = {"tokens": prompt + completion}
        return {**spend, "money": cost} if cost else spend

    async def _reserve(
        self,
        ctx: ActionContext,
        models: Sequence[str],
        prompt: int,
        completion: int,
        used: Mapping[str, int],
    ) -> None:
        """Reserve a model call's most against the run's budget, committed before it is sent.

        Checked and committed under the commit lock (see :func:`~phasegraph.run._spend.reserve`):
        two nodes never reserve past the limit together.

        Raises:
            SpendRefusedError: It does not fit (nothing is committed).
            LeaseLostError: As :meth:`_commit`.
        """
        budget = self._prepared.definition.budget
        if budget is None:  # the context reserves only under a budget: kept for typing
            return
        async with self._lock:
            found = reserve(
                self._state,
                budget,
                ctx.node_id,
                effect_id=ctx.effect_id,
                call=(models, prompt, completion),
                used=used,
            )
            if isinstance(found, SpendRefusedError):
                found.add_context(run_id=self.run_id)
                raise found
            await self._commit(*_encode(self._steps.ledger_step(self._state, ctx.node_id, found)))

    async def _once(self, site: _Site, ctx: ActionContext) -> ActionResult:
        """Run a ``once`` action, its intent committed first, or its uncertainty settled.

        An intent with no result is here only under ``retry`` or ``reconcile``, or after a
        ``run_again`` answer (``ask`` and ``fail`` are decided before the action starts).
        """
        entry = next((e for e in ctx.ledger if e.index == ACTION_INDEX), None)
        policy = site.policy
        reconcile = policy.reconcile
        if entry is not None and reconcile is not None and entry.on_unknown is OnUnknown.RECONCILE:
            found = await reconcile(ctx, entry)
            if found is not None:
                return coerce_result(found, f"reconciler of node {ctx.node_id!r}")
        # Every run commits its intent again, under the binding's own policy: a crash
        # after a re-run (a run_again answer) asks again instead of running it unasked.
        await ctx.record_effect(
            LedgerEntry(id=ctx.effect_id, effect=Effect.ONCE, on_unknown=policy.on_unknown)
        )
        return await site.action(ctx)

    def _stream(self, node_id: str, kind: str, fields: Mapping[str, Any]) -> None:
        """Publish a live event of an action now, numbered and kept until its step commits."""
        event = self._streams.publish(self._state, self._hold.lease.token, node_id, kind, fields)
        if self._bus.listening:
            self._bus.publish(event)

    async def _outcome_step(self, node_id: str, outcome: _Outcome) -> tuple[StepRecord, bytes]:
        """Turn an action's outcome into an encoded record; any refusal fails the node.

        An action that cancelled itself cancels the run: the other actions are stopped.
        """
        steps, state = self._steps, self._state
        result, error, events = outcome.result, outcome.error, outcome.events
        if isinstance(error, asyncio.CancelledError):
            await self._stop_actions()
            reason = f"cancelled by the action of node {node_id!r}"
            return _encode(steps.cancel(state, reason))
        if isinstance(error, SpendRefusedError):
            return _encode(steps.budget_out(state, node_id, error, events))
        if error is not None or not isinstance(result, ActionResult):
            kind = type(result).__name__
            error = error or RunError(f"action returned {kind}, not an ActionResult")
            return _encode(steps.action_failed(state, node_id, error, events))
        try:
            record = steps.transition(state, node_id, result, events)
            return record, codec.encode_record(record)
        except CodecError as exc:
            # Nothing of this result is committed but its trigger; the error names the value.
            refused = ActionResult(trigger=result.trigger)
            return _encode(steps.node_failed(state, node_id, exc, (), refused))
        except RunError as exc:
            return _encode(steps.node_failed(state, node_id, exc, (), result))

    # -- persistence -------------------------------------------------------------------

    async def _commit(self, record: StepRecord, blob: bytes) -> StepRecord:
        """Commit the step, then make it the run's state (and queue its node's next action).

        Raises:
            LeaseLostError: The store refused the commit: the run has another holder.
            StoreUnavailableError: The store stayed away; nothing of this step was written.
        """
        state = self._steps.apply(self._state, record)
        snapshot = self._checkpoints.snapshot(state, blob)
        commit = Commit(seq=record.seq, record=blob, snapshot=snapshot, meta=run_meta(state))
        try:
            await self._store_commit(commit)
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
        if snapshot is not None:
            self._checkpoints.committed(record.seq, snapshot)
        self._committed(record, state)
        return record

    async def _store_commit(self, commit: Commit) -> None:
        """Commit, retrying after a failure; an unreachable store is retried for two leases.

        Commits are idempotent (one found already written succeeds), so a retry after a
        lost reply is safe. A store blip costs a pause, not the run; once the store has
        been silent for a whole lease, the keeper's cut-off stops the wait. This bound is
        for a store that renews but cannot commit.
        """
        give_up: float | None = None
        for attempt in itertools.count():
            try:
                await self._store.commit(self._hold.lease, commit)
                return
            except asyncio.CancelledError:
                self._uncertain = commit.seq  # cut off mid-commit: it may have landed
                raise
            except StoreUnavailableError:
                now = asyncio.get_running_loop().time()
                if give_up is None:
                    give_up = now + 2 * self._hold.lease.ttl
                elif now >= give_up:
                    raise
            await asyncio.sleep(_RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)])

    def _committed(self, record: StepRecord, state: RunState) -> None:
        """Make the committed step's state the run's (and queue its node's next action)."""
        previous = self._state.status
        self._state = state
        self._streams.committed(state.run_id, record)  # the step stands for its live events
        # Emitted only after the commit: an event never describes an uncommitted step.
        if self._bus.listening:
            for event in events_for(state.run_id, record, previous):
                self._bus.publish(event)
        node = record.node
        if node is not None and record.ledger is None:  # a ledger step moves no node
            # The record holds the node's new state (the run state's map is slower to read).
            moved = record.nodes.get(node) or state.nodes[node]
            if moved.status is _RUNNING:
                self._to_launch.append(node)
            if len(record.nodes) > 1 and record.kind == "reply":
                # A reply to the budget gate sets every node it held running again.
                self._to_launch += [
                    other
                    for other, after in record.nodes.items()
                    if after.status is _RUNNING and other != node and other not in self._tasks
                ]
