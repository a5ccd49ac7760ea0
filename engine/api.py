"""The Python facade: one :class:`Engine`, bound to a store, that the CLI and server call.

Example:
    >>> import asyncio
    >>> from phasegraph import Engine, open_store
    >>> async def main() -> str:
    ...     async with open_store("memory://") as store:
    ...         state = await Engine(store).run("hello", {"who": "docs"})
    ...         return state.status
    >>> asyncio.run(main())
    'completed'
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, TypeAlias, TypeVar

from phasegraph import run as runs
from phasegraph.errors import InputError, RunStateError, SpecError
from phasegraph.events import EventBus
from phasegraph.model import Actor, GraphDef, RunState, RunStatus, StepRecord, frozen_map
from phasegraph.run import Clock, IdFactory, RunOptions, SystemClock, TimeOrderedIds
from phasegraph.run._checkpoint import Checkpoints
from phasegraph.run._create import create_run
from phasegraph.run._fork import fork_state, nothing_to_resume
from phasegraph.run._lease import LeaseKeeper
from phasegraph.run._options import RunEnvironment, check_run_id
from phasegraph.run._stored import decode_history, history_json, load
from phasegraph.run._stream import StreamLog, StreamSettings
from phasegraph.store.base import RunMeta, Store

# Reading a run needs none of the machinery that drives one: the interpreter, graph
# preparation, replay, the action kinds and the YAML loader are reached through ``runs``
# (imported on first use, see phasegraph.run) and imported in the methods that drive, so
# ``phasegraph history`` and ``show`` start fast.
if TYPE_CHECKING:
    from phasegraph.run import Migration, PreparedGraph, Renames, ReplayReport, Run
    from phasegraph.run._children import ParentLink
    from phasegraph.run._definitions import Definitions
    from phasegraph.run._inbox import Sent

__all__ = ["Engine", "GraphSource", "StreamSettings"]

GraphSource: TypeAlias = "PreparedGraph | GraphDef | str | Path"
"""A graph: prepared, a loaded definition, a built-in name, or a path to a YAML file."""

K = TypeVar("K")
V = TypeVar("V")
_CACHE_LIMIT: Final = 256  # prepared graphs (and file stamps) an engine keeps


class Engine:
    """Runs graphs against one store.

    Use as ``async with Engine(store) as engine:`` (or call :meth:`aclose`) so that the
    connections its model calls keep open are closed when it is done.

    Args:
        store: Where runs are kept.
        options: Checkpoint interval, lease length and owner name.
        clock: The time source (tests pass a fake one).
        ids: The run-id source (tests pass a counting one).
        bus: Receives every event of the runs this engine drives.
        streams: How live events (a model's streamed text) are kept for readers that
            reconnect: retention, and whether they are written to the store (durable).
        tracer_provider: An OpenTelemetry ``TracerProvider``: trace the runs this engine
            drives to it (needs the ``otel`` extra; off when ``None``). The engine never
            installs a global provider.
        trace_content: Put the model's messages, system instructions and tool calls'
            arguments and results in the traces (secrets masked); ``None`` reads the
            standard ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, and leaves
            content out unless that says true.
        middleware: Layers around every action of the graphs this engine prepares,
            outermost first and outside the graph's own ``middleware:`` (a cassette's
            player answers calls from its recording there).
    """

    def __init__(
        self,
        store: Store,
        *,
        options: RunOptions | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        bus: EventBus | None = None,
        streams: StreamSettings | None = None,
        tracer_provider: Any = None,
        trace_content: bool | None = None,
        middleware: Sequence[runs.Middleware] = (),
    ) -> None:
        self.store = store
        self.options = options or RunOptions()
        self.clock = clock or SystemClock()
        self.ids = ids or TimeOrderedIds()
        self.bus = bus or EventBus()
        self.streams = StreamLog(store, streams)
        """Numbers and keeps the live events of this engine's runs until their turns commit."""
        self.leases = LeaseKeeper(store, self.options)
        """Takes, renews and gives back the leases of the runs this engine drives."""
        self._middleware: tuple[runs.Middleware, ...] = tuple(middleware)
        if tracer_provider is not None:
            from phasegraph.run._tracing import Tracing  # only then: opentelemetry is optional

            tracing = Tracing(tracer_provider, content=trace_content)
            self.bus.subscribe(tracing.listen)
            self._middleware = (*self._middleware, tracing.middleware)
        self._prepared: dict[tuple[str, str], PreparedGraph] = {}
        self._loaded: dict[str, tuple[PreparedGraph, tuple[tuple[str, int, int], ...]]] = {}
        self._definitions: Definitions | None = None

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
        """Close the model clients (and scripted model servers) calls keep open.

        They are kept per event loop, shared by the engines on it: closing one engine
        closes them, calls still in flight finish first, and a later call opens anew.
        The store is not closed (whoever opened it closes it). Whatever no engine closed
        is closed when the event loop shuts down.
        """
        # Loaded by the first model call: a process that made none has nothing to close
        # (and a run of a graph without models never imports the model package).
        pools = sys.modules.get("phasegraph.actions.llm._pool")
        if pools is not None:
            await pools.close_loop_pool()

    def prepare(self, graph: GraphSource) -> PreparedGraph:
        """Load (if needed) and compile a graph; compiled once per engine and digest.

        Raises:
            SpecError: The graph or a machine it uses is invalid.
        """
        if isinstance(graph, runs.PreparedGraph):
            return graph
        if not isinstance(graph, GraphDef):
            loaded = self._loaded.get(str(graph))
            # Re-read a file only when it, or a machine file it uses, changed on disk.
            if loaded is not None and _unchanged(loaded[1]):
                return loaded[0]
        if isinstance(graph, GraphDef):
            definition = graph
        else:
            from phasegraph.spec import load_graph  # here, not at the top: see the imports

            definition = load_graph(graph)
        if isinstance(graph, GraphDef):
            source = definition.location.path if definition.location else definition.name
        else:
            source = str(Path(graph).resolve()) if _is_path(graph) else str(graph)
        key = (source, definition.digest)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = _remember(self._prepared, key, self._compile(definition, source))
        if not isinstance(graph, GraphDef):
            _remember(self._loaded, str(graph), (prepared, _stamp(definition)))
        return prepared

    @property
    def definitions(self) -> Definitions:
        """The stored definitions of this store's runs (see phasegraph.run._definitions)."""
        if self._definitions is None:  # made on first use: reading a run never needs it
            from phasegraph.run._definitions import Definitions

            self._definitions = Definitions(self.store, self._compile)
        return self._definitions

    def _compile(self, definition: GraphDef, source: str) -> PreparedGraph:
        return runs.prepare(definition, source, middleware=self._middleware)

    async def prepared_for(self, state: RunState) -> PreparedGraph:
        """The graph ``state``'s run follows: its stored definition, never the file on disk.

        A run created before definitions were stored follows its graph file while the
        file is the version it started with (it is pinned when it is next driven).

        Raises:
            RunStateError: The run's definition is not in the store, or (an older run)
                its graph file changed or is gone: ``phasegraph migrate`` moves it.
            SpecError: The stored definition does not load here (e.g. a Python module
                it imports is missing).
        """
        if state.definition:
            return await self.definitions.prepared(state)
        return self._unpinned(state)

    def _given(self, graph: GraphSource, state: RunState) -> PreparedGraph:
        prepared = self.prepare(graph)
        if prepared.definition.digest != state.graph_digest:
            raise RunStateError(
                f"run {state.run_id!r} follows version {state.graph_digest[:12]} of graph "
                f"{state.graph!r}; the graph given is version "
                f"{prepared.definition.digest[:12]}: move the run to it with migrate",
                run_id=state.run_id,
            )
        return prepared

    async def _opened(
        self, state: RunState, lenient: bool, instead: PreparedGraph | None
    ) -> PreparedGraph:
        if not lenient:
            return await self.prepared_for(state)
        try:  # an older run, to cancel or migrate: its file as it is now will do
            return self.prepare(state.graph_source)
        except SpecError:
            if instead is None:
                raise
            return instead

    def _unpinned(self, state: RunState) -> PreparedGraph:
        """The graph file of a run created before definitions were stored, if unchanged."""
        try:
            prepared = self.prepare(state.graph_source)
        except SpecError as exc:
            raise RunStateError(
                f"run {state.run_id!r} was created before phasegraph stored definitions, and "
                f"its graph file {state.graph_source} does not load now ({exc.problems[0]}); "
                f"restore the file, or move the run with 'phasegraph migrate {state.run_id} "
                "--to FILE'",
                run_id=state.run_id,
            ) from None
        if prepared.definition.digest != state.graph_digest:
            raise RunStateError(
                f"run {state.run_id!r} was created before phasegraph stored definitions, and "
                f"its graph file {state.graph_source} changed since (version "
                f"{state.graph_digest[:12]}, now {prepared.definition.digest[:12]}): check "
                f"the move with 'phasegraph migrate {state.run_id} --to "
                f"{state.graph_source} --dry-run', then make it without --dry-run",
                run_id=state.run_id,
            )
        return prepared

    @contextlib.asynccontextmanager
    async def start(
        self,
        graph: GraphSource,
        run_input: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        actor: Actor | None = None,
        parent: ParentLink | None = None,
    ) -> AsyncIterator[Run]:
        """Create a run (committing seq 0) and hold it open for stepping.

        ``actor`` (who starts it) is recorded on the seq-0 step, and so is ``parent``, the
        gate a child run answers when it ends (see :mod:`phasegraph.worker._children`).

        Raises:
            SpecError: The graph is invalid.
            InputError: The input does not match the graph's input schema, or ``run_id``
                breaks the run-id rule (:data:`~phasegraph.run.RUN_ID_PATTERN`).
            RunStateError: A run with ``run_id`` exists already.
        """
        async with await self._create(graph, run_input, run_id, actor, parent) as run:
            yield run

    async def _create(
        self,
        graph: GraphSource,
        run_input: Mapping[str, Any] | None,
        run_id: str | None,
        actor: Actor | None = None,
        parent: ParentLink | None = None,
    ) -> Run:
        """Create a run (committing seq 0); the caller enters the returned run."""
        prepared = self.prepare(graph)
        run_input = dict(run_input or {})
        _validate_input(prepared.definition, run_input)
        run_id = check_run_id(run_id) if run_id else self.ids.new_run_id()
        from phasegraph.run._prepare import initial_state  # driving machinery: see imports

        driver = runs.Run  # imported now, not while the lease is held (see the imports)
        key = await self.definitions.pin(prepared)
        state = initial_state(prepared, run_id, run_input, self.clock.now(), key)
        record = None
        if actor is not None or parent is not None:
            origin = frozen_map(None) if parent is None else parent.result()
            record = StepRecord(
                seq=0, time=state.created_at, kind="created", actor=actor, result=origin
            )
        created = await create_run(self.store, self.leases, state, record)
        checkpoints = Checkpoints(
            self.options.checkpoint_policy(), seq=0, size=created.snapshot_bytes
        )
        return driver(
            prepared=prepared,
            hold=created.hold,
            state=state,
            checkpoints=checkpoints,
            env=self._environment(),
        )

    @contextlib.asynccontextmanager
    async def open(
        self,
        run_id: str,
        *,
        graph: GraphSource | None = None,
        to_cancel: bool = False,
        instead: PreparedGraph | None = None,
    ) -> AsyncIterator[Run]:
        """Load a run's head snapshot, take its lease and hold it open for stepping.

        The run follows the definition it stored (see :meth:`prepared_for`), whatever its
        graph file says now; a run created before definitions were stored is pinned to
        its unchanged file here, with a ``migrate`` step.

        Args:
            run_id: The run.
            graph: The graph the run follows, given in Python (a definition built without
                files is not stored): it must be the version the run follows.
            to_cancel: Only to cancel or migrate it: an older run whose graph file changed
                is opened on the file as it is now (and not pinned to it).
            instead: Only to migrate it to this graph: an older run whose graph file
                does not load any more is opened on this one.

        Raises:
            RunNotFoundError: No such run.
            JournalHeadError: The run's records do not end at its head seq (refused before
                the lease is taken).
            LeaseHeldError: Another live process is driving the run.
            RunStateError: The run's definition is not stored, or (an older run) its
                graph file changed: ``phasegraph migrate`` moves it.
        """
        loaded = await load(self.store, run_id)
        lenient = (to_cancel or instead is not None) and not loaded.state.definition
        if graph is not None:
            prepared = self._given(graph, loaded.state)
        else:
            prepared = await self._opened(loaded.state, lenient, instead)
        driver = runs.Run  # imported now, not while the lease is held (see the imports)
        hold = await self.leases.acquire(run_id)
        try:
            # Re-read under the lease: the head may have moved before we got it. Seqs are
            # never rewritten, so an unmoved head is the state already rebuilt.
            if (await self.store.read(run_id)).seq != loaded.stored.seq:
                before = loaded.state.definition
                loaded = await load(self.store, run_id)
                if loaded.state.definition != before:  # migrated meanwhile
                    prepared = await self.prepared_for(loaded.state)
            pin = not loaded.state.definition and not lenient
            key = await self.definitions.pin(prepared) if pin else ""
        except BaseException:
            await hold.release()
            raise
        checkpoints = Checkpoints(
            self.options.checkpoint_policy(),
            seq=loaded.stored.snapshot_seq,
            size=loaded.snapshot_bytes,
            cache=loaded.snapshots,
        )
        run = driver(
            prepared=prepared,
            hold=hold,
            state=loaded.state,
            checkpoints=checkpoints,
            env=self._environment(),
        )
        async with run:
            if key:  # an older run: pinned to the definition it has followed all along
                from phasegraph.run._migrate import pinned

                await run.migrate(prepared, pinned(prepared, key, loaded.state, ()))
            await run.settle_messages()
            yield run

    def _environment(self) -> RunEnvironment:
        """What the runs this engine drives share (read now: tests swap the clock)."""
        return RunEnvironment(
            store=self.store, clock=self.clock, bus=self.bus, streams=self.streams
        )

    async def run(
        self,
        graph: GraphSource,
        run_input: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        actor: Actor | None = None,
    ) -> RunState:
        """Start a run and drive it until it finishes or waits; return its state.

        ``actor`` (who starts it) is recorded on the seq-0 step.
        """
        # As ``start``, without a generator frame held for as long as the run goes on, and
        # without holding each step's record until the next one is committed.
        async with await self._create(graph, run_input, run_id, actor) as run:
            await run.drive()
            return run.state

    async def resume(self, run_id: str, *, graph: GraphSource | None = None) -> RunState:
        """Continue a run from its head snapshot until it finishes or waits.

        The run follows the definition it stored when it was created (or migrated to).

        Args:
            run_id: The run.
            graph: The graph the run follows, when it was built in Python rather than
                loaded from files (such a definition is not stored): see :meth:`open`.

        Raises:
            RunStateError: The run already finished, or ``graph`` is not its version.
        """
        async with self.open(run_id, graph=graph) as run:
            if run.state.status.terminal:
                raise nothing_to_resume(run_id, run.state.status)
            await run.drive()
            return run.state

    async def reply(
        self,
        run_id: str,
        interrupt_id: str,
        trigger: str,
        *,
        payload: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        drive: bool = True,
        graph: GraphSource | None = None,
        actor: Actor | None = None,
        step: int | None = None,
        trusted: bool = False,
    ) -> RunState:
        """Answer a pending interrupt, then (by default) drive the run on.

        A reply applies once. It answers the gate ``interrupt_id`` as it is open now, or,
        given ``step``, only the opening of it at that step (the gate's ``seq``); a reply
        to an opening already answered or closed is refused, and so is one by an
        ``actor`` the gate does not name among its ``reviewers``. A caller with the store
        in hand is trusted: with ``actor=None``, or ``trusted=True`` (the CLI, which names
        the local user only to record it), reviewers do not restrict it. A server names
        its caller and never trusts it.

        Args:
            run_id: The run.
            interrupt_id: The interrupt's id (``{run_id}:{node_id}:{hook}``).
            trigger: The trigger to fire on the waiting node (``confirm``, ``reject``, ...).
            payload: What the next action sees as ``ctx.payload`` (e.g. ``feedback``).
            data: Updates to the run's data, merged per top-level key.
            drive: Continue the run until it finishes or waits again.
            graph: The graph the run follows, when it was built in Python (see
                :meth:`open`).
            actor: Who answers; recorded on the reply's step.
            step: The step that opened the gate, as the answerer was shown it.
            trusted: Record ``actor`` without holding it to the gate's reviewers.

        Raises:
            GateAnsweredError: The gate (that opening of it) was answered already.
            StaleReplyError: ``step`` is not the step that opened the gate now pending.
            NotAReviewerError: The gate names reviewers and ``actor`` is not one of them.
            RunStateError: The run is not waiting, or has no such interrupt.
            IllegalTriggerError: The trigger is not legal in the waiting node's state.
        """
        from phasegraph.actions import ActionResult  # here, not at the top: see the imports

        result = ActionResult(trigger=trigger, payload=frozen_map(payload), data=frozen_map(data))
        async with self.open(run_id, graph=graph) as run:
            if run.state.status.terminal:
                from phasegraph.run._gates import GateNotOpen, refused_reply

                refused = GateNotOpen(
                    f"run {run_id!r} already {run.state.status}; it waits for no reply",
                    run_id=run_id,
                )
                raise await refused_reply(self.store, run.state, interrupt_id, step, refused)
            await run.reply(interrupt_id, result, actor=actor, step=step, trusted=trusted)
            if drive:
                await run.drive()
            return run.state

    async def send(
        self,
        run_id: str,
        payload: Mapping[str, Any],
        *,
        message_id: str | None = None,
        drive: bool = True,
        graph: GraphSource | None = None,
    ) -> Sent:
        """Send a message to a run; it is refused, or kept in its inbox and delivered.

        The graph's ``busy:`` says what a message does while the run is busy (see
        :mod:`phasegraph.run._inbox`). A message that is not refused is committed to the
        run's inbox before this returns, and delivered in order where the machine takes
        it; one sent again under an id kept already is not taken again (``duplicate``).
        With ``drive``, a run nobody else drives is opened here, takes what it can and
        goes on until it finishes or waits; a run another process drives takes it there.

        Args:
            run_id: The run.
            payload: The message: what the node that takes it reads as ``ctx.payload``.
            message_id: Its id (default: a new one); a message sent twice under one id
                is taken once.
            drive: Open the run and drive it on (as :meth:`reply` does).
            graph: The graph the run follows, when it was built in Python.

        Raises:
            RunBusyError: The run is busy and its graph (or gate) rejects messages then;
                nothing was kept.
            RunStateError: The run has finished, or its graph takes no messages.
            InputError: The message id or payload is unusable.
        """
        sent = await self.post_message(run_id, payload, message_id=message_id, graph=graph)
        if not drive or sent.duplicate:
            return sent
        from phasegraph.errors import LeaseHeldError

        try:
            async with self.open(run_id, graph=graph) as run:
                await run.drive()
        except LeaseHeldError:
            pass  # another process drives the run: it takes the message there
        return await self._sent(sent)

    async def post_message(
        self,
        run_id: str,
        payload: Mapping[str, Any],
        *,
        message_id: str | None = None,
        graph: GraphSource | None = None,
    ) -> Sent:
        """Keep a message in the run's inbox, or refuse it; deliver nothing.

        What :meth:`send` does before it drives the run; a server posts, then has the
        run's driver deliver it.

        Raises:
            RunBusyError: As :meth:`send`.
            RunStateError: As :meth:`send`.
            InputError: As :meth:`send`.
        """
        from phasegraph.run import _inbox as inbox

        state = await self.get(run_id)
        prepared = await self.prepared_for(state) if graph is None else self._given(graph, state)
        if (refused := inbox.no_messages(prepared, state)) is not None:
            raise refused
        given = inbox.check_message_id(message_id) if message_id is not None else None
        body = inbox.encode_message(payload)
        waiting = await self.store.messages(run_id, limit=100)
        if given is not None and (kept := next((m for m in waiting if m.id == given), None)):
            return inbox.Sent(
                id=given, position=kept.position, duplicate=True, taken=False, state=state
            )
        refused_busy = inbox.refusal_for(prepared, state, waiting=len(waiting))
        if refused_busy is not None:
            raise refused_busy
        new_id = given or uuid.uuid4().hex
        at = self.clock.now().timestamp()
        message, fresh = await self.store.post_message(run_id, new_id, body, at)
        sent = inbox.Sent(
            id=new_id, position=message.position, duplicate=not fresh, taken=False, state=state
        )
        return await self._sent(sent) if not fresh else sent

    async def _sent(self, sent: Sent) -> Sent:
        """``sent`` with the run as it is now, and whether it took the message."""
        state = await self.get(sent.state.run_id)
        first = await self.store.messages(state.run_id, limit=1)
        taken = not first or first[0].position > sent.position
        return dataclasses.replace(sent, taken=taken, state=state)

    async def cancel(
        self,
        run_id: str,
        reason: str = "cancelled by request",
        *,
        graph: GraphSource | None = None,
        actor: Actor | None = None,
    ) -> RunState:
        """Cancel a run that no live process is driving (waiting, parked or crashed).

        ``actor`` (who cancels it) is recorded on the cancel step.

        Raises:
            LeaseHeldError: A live process is driving the run.
            RunStateError: The run already finished.
        """
        async with self.open(run_id, graph=graph, to_cancel=True) as run:
            await run.cancel(reason, actor=actor)
            return run.state

    async def get(self, run_id: str, seq: int | None = None) -> RunState:
        """The run state at ``seq`` (default: the head).

        Raises:
            RunNotFoundError: No such run, or no such seq in it.
            JournalHeadError: The run's records do not end at its head seq.
            CodecError: A stored payload is corrupt (``UnsupportedFormatError``: newer
                format); the message names the run.
        """
        return (await load(self.store, run_id, seq)).state

    async def history(
        self, run_id: str, *, start: int = 0, stop: int | None = None
    ) -> list[StepRecord]:
        """The step records ``start <= seq < stop``, oldest first.

        Raises:
            RunNotFoundError: No such run.
            JournalHeadError: The run's records do not end at its head seq.
            CodecError: A stored record is corrupt or of a newer format; the message
                names the run and the seq.
        """
        # Read every blob first, then decode them in one synchronous block: no await
        # inside it, so the collector can be paused while thousands of records are built.
        stored = await self.store.history_list(run_id, start=start, stop=stop)
        return decode_history(run_id, stored, start)

    async def history_json(self, run_id: str, *, start: int = 0, stop: int | None = None) -> bytes:
        """The step records ``start <= seq < stop`` as JSON: what ``history --json`` prints.

        The text (UTF-8) is an array of ``StepRecord`` (``specs/openapi.yaml``), one per
        record :meth:`history` returns, with the same errors; it is rendered from the
        stored bytes, with no step record built (see :func:`~phasegraph.run.history_json`).

        Raises:
            RunNotFoundError: No such run.
            JournalHeadError: The run's records do not end at its head seq.
            CodecError: A stored record is corrupt or of a newer format; the message
                names the run and the seq.
        """
        # As history: every blob read first, then rendered in one synchronous block.
        stored = await self.store.history_list(run_id, start=start, stop=stop)
        return history_json(run_id, stored, start)

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunMeta]:
        """Runs, most recently updated first."""
        return await self.store.list_runs(
            status=str(status) if status else None, limit=limit, offset=offset
        )

    async def fork(
        self,
        run_id: str,
        at_seq: int | None = None,
        patch: Mapping[str, Any] | None = None,
        *,
        actor: Actor | None = None,
    ) -> str:
        """Create a new run from the state of ``run_id`` at ``at_seq``; return its id.

        The new run's seq 0 is the source state at ``at_seq`` (default: the head) with
        ``patch`` merged into its data per top-level key, under the same graph and status;
        ``actor`` (who forks it) is recorded on that step. The source run is only read.
        ``resume`` continues the fork if it was not finished at that seq (see
        :func:`phasegraph.run.fork_state`).

        Raises:
            RunNotFoundError: No such run, or no such seq in it.
            InputError: A patch key is not a non-empty string.
            CodecError: A patch value cannot be stored, or the source's payloads are bad.
        """
        source = await self.get(run_id, at_seq)
        state, record = fork_state(
            source, run_id=self.ids.new_run_id(), patch=patch, now=self.clock.now(), actor=actor
        )
        created = await create_run(self.store, self.leases, state, record)
        await created.hold.release()
        return state.run_id

    async def migrate(
        self,
        run_id: str,
        to: GraphSource,
        *,
        renames: Renames | None = None,
        dry_run: bool = False,
        actor: Actor | None = None,
    ) -> Migration:
        """Check that run ``run_id`` fits the definition ``to``, and move it there.

        The check is static (nothing runs): every node, the state it stands in, its open
        gate, its budgets and its step in flight must have a place in ``to`` (see
        :func:`~phasegraph.run._migrate.fit`). When they do and ``dry_run`` is false, one
        ``migrate`` step is committed naming ``actor`` and both definitions (``to`` is
        stored), and the run follows ``to`` from then on.

        Returns:
            The migration: its problems (none: it fits), and whether it was applied.

        Raises:
            RunNotFoundError: No such run.
            RunStateError: The run already completed or was cancelled.
            LeaseHeldError: A live process is driving the run (checked only to apply).
            SpecError: ``to`` does not load.
        """
        from phasegraph.run._migrate import Migration, fit, pinned

        state = await self.get(run_id)
        if state.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
            raise RunStateError(
                f"run {run_id!r} already {state.status}; there is nothing left to migrate "
                f"(fork it to run it again: phasegraph fork {run_id})",
                run_id=run_id,
            )
        prepared = self.prepare(to)
        found = fit(state, prepared, renames)
        migration = Migration(
            run_id=run_id,
            from_digest=state.graph_digest,
            to_digest=prepared.definition.digest,
            problems=found.problems,
        )
        if dry_run or found.problems:
            return migration
        async with self.open(run_id, instead=prepared) as run:
            if run.state.seq != state.seq:  # it moved before the lease was ours: check again
                found = fit(run.state, prepared, renames)
                if found.problems:
                    return dataclasses.replace(migration, problems=found.problems)
            key = await self.definitions.pin(prepared)
            renamed = renames.nodes if renames is not None else {}
            record = await run.migrate(
                prepared,
                pinned(prepared, key, run.state, found.dropped),
                nodes=found.nodes,
                renamed=renamed,
                actor=actor,
            )
        return dataclasses.replace(migration, applied=True, seq=record.seq)

    async def replay(self, run_id: str, graph: GraphSource | None = None) -> ReplayReport:
        """Re-drive a run's recorded history through the machines; no action runs.

        Args:
            run_id: The run.
            graph: Replay against this graph instead of the one the run recorded (to find
                where a changed definition diverges).

        Returns:
            ``identical``, or the first step the replay does not reproduce.

        Raises:
            RunNotFoundError: No such run.
            JournalHeadError: The run's records do not end at its head seq.
            SpecError: The graph is invalid.
            CodecError: A stored payload is corrupt or of a newer format.
        """
        first = await self.get(run_id, 0)
        if graph is not None:
            prepared = self.prepare(graph)
        elif first.definition:
            prepared = await self.prepared_for(first)
        else:  # an older run: the definition its first migrate step pinned, if any
            prepared = await self._first_pinned(run_id, first)
        from phasegraph.run._replay import replay_history  # driving machinery: see imports

        migrated = None if graph is not None else self.prepared_for
        return await replay_history(self.store, prepared, first, migrated)

    async def _first_pinned(self, run_id: str, first: RunState) -> PreparedGraph:
        """The graph an older run followed before its first ``migrate`` step (or its file)."""
        from phasegraph.model import MIGRATE

        for record in await self.history(run_id, start=1):
            if record.kind == MIGRATE:
                before = record.result.get("from", {})
                if before.get("graph_digest") == first.graph_digest:  # pinned, not moved
                    pin = dataclasses.replace(first, definition=str(record.result["definition"]))
                    return await self.prepared_for(pin)
                break
        return self._unpinned(first)


def _remember(cache: dict[K, V], key: K, value: V) -> V:
    """Store ``value`` under ``key``, forgetting the oldest entries past the limit.

    A long-lived engine (a server taking uploads) prepares an unbounded number of
    graphs; runs keep their own reference, so forgetting one only costs a recompile.
    """
    cache[key] = value
    while len(cache) > _CACHE_LIMIT:
        del cache[next(iter(cache))]  # the oldest: dicts keep insertion order
    return value


def _stamp(definition: GraphDef) -> tuple[tuple[str, int, int], ...]:
    """Modification time and size of the graph file and every machine file it uses."""
    paths = {m.location.path for m in definition.machines.values() if m.location}
    if definition.location is not None:
        paths.add(definition.location.path)
    return tuple((path, *_file_stamp(path)) for path in sorted(paths))


def _unchanged(stamps: tuple[tuple[str, int, int], ...]) -> bool:
    """Whether every file of a stamp still has the modification time and size it had.

    The files are the ones that load read (as it spelled their paths), so a graph
    prepared before under another spelling of its path is still recognised.
    """
    return all(_file_stamp(path) == (mtime, size) for path, mtime, size in stamps)


def _file_stamp(path: str) -> tuple[int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        return (-1, -1)
    return (stat.st_mtime_ns, stat.st_size)


def _is_path(source: str | Path) -> bool:
    text = str(source)
    return isinstance(source, Path) or "/" in text or text.endswith((".yaml", ".yml"))


def _validate_input(definition: GraphDef, run_input: Mapping[str, Any]) -> None:
    schema = definition.input_schema
    if schema is None:
        return
    from phasegraph.spec._cache import remember_valid, valid_before

    if valid_before(schema, run_input):
        return  # the validator's import costs more than a short run: see spec._cache
    from phasegraph.spec._input import input_validator

    validator = input_validator(schema)
    problems = sorted(validator.iter_errors(dict(run_input)), key=lambda e: list(e.path))
    if problems:
        lines = [
            f"input{''.join(f'.{p}' for p in error.path) or ''}: {error.message}"
            for error in problems
        ]
        raise InputError(f"graph {definition.name!r} rejects the run input:\n" + "\n".join(lines))
    remember_valid(schema, run_input)
