"""Build step records: pure functions from the run state (and an action result) to a record.

Nothing here does I/O or awaits; the interpreter commits what these functions return.
Keeping step construction pure is what makes snapshots, resume and replay exact: a
record depends only on the state passed in. The one thing a builder remembers is the
readiness (:class:`~phasegraph.core.Frontier`) of the last node states it saw, so
that states produced by :meth:`StepBuilder.apply` are not rescanned; any other state
gets a frontier built afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, final

from phasegraph.actions import ActionResult
from phasegraph.actions._failures import (
    ERROR_LOG_EVENT,
    ERROR_TRIGGER,
    classify_error,
    describe_error,
)
from phasegraph.actions._human import TIMEOUT_TRIGGER, HumanGate, admits, render_payload
from phasegraph.core._graph import Frontier
from phasegraph.core._machine import Position, StepResult
from phasegraph.errors import (
    ActionError,
    BudgetExhaustedError,
    RunError,
    SpendRefusedError,
)
from phasegraph.model import (
    EMPTY,
    MIGRATE,
    PATH_SEPARATOR,
    Actor,
    ErrorRecord,
    Interrupt,
    LedgerEntry,
    NodeOutcome,
    NodeState,
    NodeStatus,
    OnUnknown,
    Plan,
    RunState,
    RunStatus,
    StepRecord,
    apply_records,
    extension,
    replace,
)
from phasegraph.run._children import child_interrupt
from phasegraph.run._effects import OUTCOME_UNKNOWN, describe, effect_gate, settle, uncertain
from phasegraph.run._gates import GateNotOpen, not_a_reviewer, stale_reply
from phasegraph.run._merge import merge_update
from phasegraph.run._options import Clock
from phasegraph.run._plans import Refusal, fresh_children, joined, read_plan, refusal_result
from phasegraph.run._prepare import PreparedGraph, with_plans
from phasegraph.run._spend import (
    RESERVE_INDEX,
    RESERVE_STEP,
    SETTLE_STEP,
    reservation,
    reserved,
)
from phasegraph.run._spend_gate import (
    BUDGET_GATE,
    REFUSED,
    budget_interrupt,
    grant,
    waiting,
)

__all__ = ["ACTION_DUE", "ActionDue", "Decision", "StepBuilder"]


@final
class ActionDue:
    """The decision that the next step is the outcome of a running node's action."""

    def __repr__(self) -> str:
        return "ACTION_DUE"


ACTION_DUE: Final = ActionDue()
"""What :meth:`StepBuilder.decide` returns when only an action's outcome can come next."""

Decision = StepRecord | ActionDue | None
"""A step to commit, the word that an action's outcome is due, or ``None``: nothing to do."""

# Enum members read from their class cost a property call each (Python 3.11): once here.
_RUN_RUNNING: Final = RunStatus.RUNNING
_FAILED: Final = NodeStatus.FAILED

_STATUS_FOR_OUTCOME = {
    None: NodeStatus.RUNNING,
    NodeOutcome.SUCCESS: NodeStatus.COMPLETED,
    NodeOutcome.CANCELLED: NodeStatus.CANCELLED,
    NodeOutcome.PARKED: NodeStatus.WAITING,
    NodeOutcome.FAILED: NodeStatus.FAILED,
    NodeOutcome.GAVE_UP: NodeStatus.FAILED,
}


class StepBuilder:
    """Builds the next record for a run of one prepared graph."""

    __slots__ = (
        "_clock",
        "_concurrency",
        "_decided_at",
        "_deciding",
        "_frontier",
        "_frontier_of",
        "_ledgers",
        "_prepared",
    )

    def __init__(
        self, prepared: PreparedGraph, clock: Clock, plans: Mapping[str, Plan] = EMPTY
    ) -> None:
        # Steps are built on the graph with the children of the plans of the run's state.
        self._prepared = with_plans(prepared, plans) if plans else prepared
        self._clock = clock
        self._concurrency = prepared.definition.concurrency
        self._frontier: Frontier | None = None
        self._frontier_of: Mapping[str, NodeState] = EMPTY
        # Whether a node of the frontier's states may hold ledger entries (a step cut
        # short after an effect): only then is an unknown outcome looked for.
        self._ledgers = False
        # The moment of the decision being made (see decide), or None until it is read.
        self._decided_at: datetime | None = None
        self._deciding = False

    @property
    def prepared(self) -> PreparedGraph:
        """The graph steps are built for.

        The prepared graph, with the children of every plan committed so far (an
        ``expand`` step applied here adds them).
        """
        return self._prepared

    def decide(self, state: RunState, due: Iterable[str], *, deadlines: bool = True) -> Decision:
        """What happens next in ``state``: the one order of decisions of every run.

        The interpreter and replay both ask this, so they cannot disagree. In order:

        1. a human gate whose deadline has passed fires ``timeout``;
        2. a run that is not running stops here (``None``);
        3. a node whose plan's children have all ended joins them (:meth:`join`);
        4. a ready node starts, if a concurrency slot is free;
        5. a node that reached a gate (a person's, or a child run's: :meth:`open_gate`)
           starts waiting, one that reached a plan turns
           it into children (:meth:`expand`), or one whose step was cut short after a
           ``once`` effect's intent asks about it or fails (:meth:`unknown_outcome`);
        6. if any node is running, its action's outcome is next (:data:`ACTION_DUE`): the
           interpreter runs the action, replay feeds the recorded outcome;
        7. otherwise the run's status settles (``None`` if it does not change).

        Records built here carry one reading of the clock, taken when the decision first
        needs the time (a decision that an action is due reads none), so a replay that
        sets its clock to a recorded step's time decides as the run did.

        Args:
            state: The run state as of the last committed step.
            due: Running nodes whose action has not started, in the order they became
                due: the candidates for a human gate.
            deadlines: Whether deadlines count. Replay passes ``False`` while it feeds a
                recorded action outcome: the run had decided to wait for that action
                before any deadline passed (otherwise the step would be the timeout).
        """
        self._deciding = True
        try:
            return self._decide(state, due, deadlines)
        finally:
            self._deciding = False
            self._decided_at = None

    def _decide(self, state: RunState, due: Iterable[str], deadlines: bool) -> Decision:
        if deadlines and state.interrupts and not state.status.terminal:
            record = self.expire(state)
            if record is not None:
                return record
        if state.status is not _RUN_RUNNING:
            return None
        frontier = self._frontier_for(state)
        prepared = self._prepared
        record = self._join_next(state, frontier) if prepared.plans else None
        if record is None:
            record = self._start(state, frontier)
        if record is None and (prepared.gates or prepared.plans or prepared.children):
            record = next(filter(None, (self._reached(state, n) for n in due)), None)
        if record is None and self._ledgers:
            record = self._first_unknown_outcome(state, due)
        if record is not None:
            return record
        if frontier.running:
            return ACTION_DUE
        return self.settle(state)

    def _join_next(self, state: RunState, frontier: Frontier) -> StepRecord | None:
        """The join of the first node whose plan's children have all ended, if any."""
        joinable = frontier.joinable()
        return self.join(state, joinable[0]) if joinable else None

    def _now(self) -> datetime:
        now = self._decided_at
        if now is None:
            now = self._clock.now()
            if self._deciding:  # every record of this decision carries this reading
                self._decided_at = now
        return now

    def apply(self, state: RunState, record: StepRecord) -> RunState:
        """The state after ``record`` (:func:`~phasegraph.model.apply_records`).

        Also moves the builder's readiness along, so the next step does not rescan. An
        ``expand`` step gives the run new nodes: the graph is prepared with them.

        Raises:
            RunStateError: If ``record.seq`` does not follow ``state.seq``.
        """
        if record.plan is not None:
            after = apply_records(state, (record,))
            self._prepared = with_plans(self._prepared, after.plans)
            self._frontier = None
            return after
        if record.kind == MIGRATE:  # nodes renamed or added: readiness is built afresh
            self._frontier = None
            return apply_records(state, (record,))
        frontier = self._frontier_for(state)
        after = apply_records(state, (record,))
        if after.nodes is not state.nodes:
            frontier.apply(record.nodes)
            self._frontier_of = after.nodes
            if record.ledger is not None:
                self._ledgers = True
        return after

    def _frontier_for(self, state: RunState) -> Frontier:
        """Readiness for ``state``'s nodes: kept from the last step, or built afresh."""
        # Identity, not equality: node maps are read-only, and this one is kept alive.
        if self._frontier is None or state.nodes is not self._frontier_of:
            prepared = self._prepared
            awaits = prepared.awaits if prepared.plans else None
            self._frontier = Frontier(prepared.workflow, state.nodes, awaits)
            self._frontier_of = state.nodes
            self._ledgers = any(node.ledger for node in state.nodes.values())
        return self._frontier

    def start_next(self, state: RunState) -> StepRecord | None:
        """Start the first ready node if a concurrency slot is free."""
        return self._start(state, self._frontier_for(state))

    def _start(self, state: RunState, frontier: Frontier) -> StepRecord | None:
        if frontier.running >= self._concurrency:
            return None
        node_id = frontier.first_ready()
        if node_id is None:
            return None
        definition = self._prepared.workflow.nodes[node_id]
        try:
            step = self._prepared.machines.start(definition.machine, node_id, definition.settings)
        except BudgetExhaustedError as exc:
            return self.node_failed(state, node_id, exc, ())
        node = self._moved(node_id, NodeState(), step, steps=0)
        return self._record(state, node_id, node, kind="start", dest=step.position.path)

    def transition(
        self,
        state: RunState,
        node_id: str,
        result: ActionResult,
        events: tuple[Mapping[str, Any], ...],
        *,
        kind: str = "transition",
        interrupts: Mapping[str, Interrupt] | None = None,
    ) -> StepRecord:
        """Fire the trigger ``result`` names and merge its data.

        Raises:
            IllegalTriggerError: The trigger is not legal in the node's state.
            BudgetExhaustedError: The destination would exceed a budget.
            DataConflictError: The data update conflicts with another node's writes.
        """
        current = state.nodes[node_id]
        prepared = self._prepared
        definition = prepared.workflow.nodes[node_id]
        update, handed = result.data, current.result
        kept = prepared.results.get(node_id) if prepared.results else None
        if kept is not None and kept in update:  # a child hands its result to its parent
            handed = update[kept]
            update = {key: value for key, value in update.items() if key != kept}
        try:
            counters = _spent(current, result.spend) if result.spend else current.counters
            step = prepared.machines.step(
                definition.machine,
                Position(path=current.path, counters=counters),
                result.trigger,
                node_id=node_id,
                settings=definition.settings,
                payload=result.payload,
            )
            data = EMPTY
            if update:
                data = merge_update(prepared, state, node_id, update)
        except RunError as exc:
            exc.add_context(run_id=state.run_id)  # machines and merges know only the node
            raise
        node = self._moved(
            node_id, current, step, steps=current.steps + 1, payload=result.payload, result=handed
        )
        summary = self._summary(result, kept)
        return self._record(
            state,
            node_id,
            node,
            kind=kind,
            interrupts=interrupts,
            source=current.path,
            trigger=result.trigger,
            dest=step.position.path,
            result=summary,
            data=data,
            events=events,
            logged=self._logged(node_id, current, result, events)
            if events or result.trigger == ERROR_TRIGGER
            else (),
        )

    def _summary(self, result: ActionResult, kept: str | None = None) -> dict[str, Any]:
        """What a record keeps of an action result: enough for replay to feed it again.

        Data is recorded after reducers, so the raw update of each reduced key is kept
        here too (replay needs what the action returned, not what the reducer made of it),
        and so is a child's result (``kept``), which goes to its node, not the data.
        """
        if not (result.payload or result.output or result.spend or result.data):
            return {"trigger": result.trigger} if result.trigger else {}  # the usual result
        summary = {
            "trigger": result.trigger,
            "payload": result.payload,
            "output": result.output,
            "spend": result.spend,
        }
        reducers = self._prepared.definition.reducers
        if (reducers or kept) and result.data:
            summary["data"] = {k: v for k, v in result.data.items() if k in reducers or k == kept}
        return {key: value for key, value in summary.items() if value}

    def _logged(
        self,
        node_id: str,
        current: NodeState,
        result: ActionResult,
        events: tuple[Mapping[str, Any], ...],
    ) -> tuple[ErrorRecord, ...]:
        """Error-log entries this step adds: a handled action error, and any the action logged.

        Called only for a step that has events or fires ``error`` (the usual step has
        neither: nothing to log, so no clock reading either).
        """
        time = self._now()
        entries = []
        if result.trigger == ERROR_TRIGGER:
            entries.append(
                ErrorRecord(
                    time=time,
                    node=node_id,
                    state=current.state,
                    message=str(result.payload.get("message", "action failed")),
                    severity="error",
                    details=result.payload,
                )
            )
        for event in events:
            if event.get("kind") != ERROR_LOG_EVENT:
                continue
            entries.append(
                ErrorRecord(
                    time=time,
                    node=node_id,
                    state=current.state,
                    message=str(event.get("message", "")),
                    severity=str(event.get("severity", "error")),
                    recovered=bool(event.get("recovered", False)),
                    details=MappingProxyType(dict(event.get("details") or {})),
                )
            )
        return tuple(entries)

    def action_failed(
        self,
        state: RunState,
        node_id: str,
        error: BaseException,
        events: tuple[Mapping[str, Any], ...],
        *,
        interrupts: Mapping[str, Interrupt] | None = None,
    ) -> StepRecord:
        """Route a raised error to the state's ``error`` trigger, or fail the node.

        ``interrupts`` is the complete pending set after the step (default: unchanged).
        """
        node = state.nodes[node_id]
        root = self._prepared.workflow.nodes[node_id].machine
        if ERROR_TRIGGER in self._prepared.machines.legal_triggers(root, node.path):
            failure = ActionResult(trigger=ERROR_TRIGGER, payload=classify_error(error))
            try:
                return self.transition(state, node_id, failure, events, interrupts=interrupts)
            except RunError as exc:
                error = exc
        return self.node_failed(state, node_id, error, events, interrupts=interrupts)

    def node_failed(
        self,
        state: RunState,
        node_id: str,
        error: BaseException,
        events: tuple[Mapping[str, Any], ...],
        result: ActionResult | None = None,
        *,
        interrupts: Mapping[str, Interrupt] | None = None,
    ) -> StepRecord:
        """Fail the node (nothing of its result is applied) and skip its dependents.

        ``interrupts`` is the complete pending set after the step (default: unchanged).
        """
        current = state.nodes[node_id]
        message = describe_error(error)
        node = NodeState(
            status=NodeStatus.FAILED,
            path=current.path,
            outcome=NodeOutcome.FAILED,
            counters=current.counters,
            steps=current.steps,
            error=message,
            result=current.result,
        )
        summary = self._summary(result) if result is not None else {}
        return self._record(
            state,
            node_id,
            node,
            kind="fail",
            source=current.path,
            trigger=result.trigger if result else None,
            dest=current.path,
            result={**summary, "error": classify_error(error)},
            events=events,
            interrupts=interrupts,
        )

    def settle(self, state: RunState) -> StepRecord | None:
        """Close a run in which nothing runs and nothing can start; None if not stuck."""
        status = self._frontier_for(state).status(EMPTY, state.interrupts)
        if status is RunStatus.RUNNING or status is state.status:
            return None
        return StepRecord(seq=state.seq + 1, time=self._now(), kind="status", status=status)

    # -- human gates and cancellation --------------------------------------------------

    def _reached(self, state: RunState, node_id: str) -> StepRecord | None:
        """The step a node that just reached its state takes before any action.

        A gate opens, or a plan becomes children (``None``: its state is neither).
        """
        return self.open_gate(state, node_id) or self.expand(state, node_id)

    # -- plans ---------------------------------------------------------------------------

    def expand(self, state: RunState, node_id: str) -> StepRecord | None:
        """Turn the node's plan into children, if its state is bound to ``plan:``.

        A plan that validates is committed as one ``expand`` step: the plan (a new
        version of it), every child it starts afresh (pending) and the node waiting for
        them. A plan that does not validate fires ``refused``, its reasons as the
        payload's ``feedback``; where the state takes no ``refused``, the node fails
        with them. ``None``: the node's state has no plan.
        """
        node = state.nodes[node_id]
        binding = self._prepared.plan_at(node_id, node.path)
        if binding is None:
            return None
        found = read_plan(binding, state, node_id)
        if isinstance(found, Refusal):
            result = refusal_result(binding, found)
            feedback = str(result.payload["feedback"])
            said = {"kind": "plan_refused", "node": node_id, "feedback": feedback}
            try:
                return self.transition(state, node_id, result, (said,))
            except RunError:
                refused = RunError(feedback, node_id=node_id, run_id=state.run_id)
                return self.node_failed(state, node_id, refused, (said,), result)
        fresh = fresh_children(found, node_id)
        nodes = dict.fromkeys(fresh, NodeState())
        nodes[node_id] = replace(node, status=NodeStatus.WAITING)
        event: dict[str, Any] = {
            "kind": "plan_expanded",
            "node": node_id,
            "version": found.version,
            "children": fresh,
            "members": len(found.members),
            "limit": found.limit,
            "called": binding.called,
        }
        return StepRecord(
            seq=state.seq + 1,
            time=self._now(),
            kind="expand",
            node=node_id,
            source=node.path,
            dest=node.path,
            nodes=MappingProxyType(nodes),
            # Something always follows: a child that can start, or, with none, the join.
            status=_RUN_RUNNING,
            events=(event,),
            plan=found,
        )

    def join(self, state: RunState, parent: str) -> StepRecord:
        """Fire ``done`` or ``failed`` on a node whose plan's children have all ended.

        With ``into``, the children's results are written there, in plan order.
        """
        node = state.nodes[parent]
        binding = self._prepared.plan_at(parent, node.path)
        plan = state.plans[parent]
        if binding is None:  # only a node waiting in its plan's state is joinable
            raise RunError(f"node {parent!r} has no plan to join", node_id=parent)
        result = joined(binding, plan, state, parent)
        event = {
            "kind": "plan_joined",
            "node": parent,
            "trigger": result.trigger,
            "version": plan.version,
            "called": binding.called,
        }
        try:
            return self.transition(state, parent, result, (event,), kind="join")
        except RunError as exc:
            return self.node_failed(state, parent, exc, (event,), result)

    # -- human gates -----------------------------------------------------------------------

    def open_gate(self, state: RunState, node_id: str) -> StepRecord | None:
        """Put the node in ``waiting`` if its state is a gate; ``None`` if it is not.

        A human gate waits for a person; a ``graph:`` binding for a child run, which
        whoever drives the run launches once this step is committed (the gate names it:
        :func:`~phasegraph.run._children.child_interrupt`). A payload or an input that
        cannot be rendered fails the node instead.
        """
        node = state.nodes[node_id]
        prepared = self._prepared
        definition = prepared.workflow.nodes[node_id]
        hook = prepared.machines.hook(definition.machine, node.path) or ""
        gate = prepared.gates.get((node_id, hook))
        if gate is not None:
            return self._wait(state, node_id, hook, gate)
        child = prepared.children.get((node_id, hook)) if prepared.children else None
        if child is None:
            return None
        try:
            asked = child_interrupt(
                child, state, node_id, hook, item=definition.item, now=self._now()
            )
        except RunError as exc:
            return self.node_failed(state, node_id, exc, ())
        return self._waiting(state, asked)

    def _wait(self, state: RunState, node_id: str, hook: str, gate: HumanGate) -> StepRecord:
        now = self._now()
        interrupt_id = self._interrupt_id(state, node_id, hook, gate)
        try:
            payload = render_payload(gate.payload, {**state.input, **state.data})
        except RunError as exc:
            return self.node_failed(state, node_id, exc, ())
        deadline = now + timedelta(seconds=gate.timeout) if gate.timeout is not None else None
        interrupt = Interrupt(
            id=interrupt_id,
            node=node_id,
            kind=gate.kind,
            payload=MappingProxyType(payload),
            deadline=deadline,
            created_at=now,
            parked=gate.park,
            reviewers=gate.reviewers,
        )
        return self._waiting(state, interrupt)

    def _waiting(self, state: RunState, interrupt: Interrupt) -> StepRecord:
        """The ``wait`` step that opens ``interrupt``: its node waits where it is.

        The interrupt records this step as the one that opened it (a reply may quote it).
        """
        interrupt = replace(interrupt, seq=state.seq + 1)
        request = {
            "kind": f"{interrupt.kind}_request",
            "id": interrupt.id,
            "payload": {**interrupt.payload},
        }
        if interrupt.reviewers:
            request["reviewers"] = list(interrupt.reviewers)
        node = replace(state.nodes[interrupt.node], status=NodeStatus.WAITING)
        return self._record(
            state,
            interrupt.node,
            node,
            kind="wait",
            source=node.path,
            dest=node.path,
            events=(request,),
            interrupts=MappingProxyType({**state.interrupts, interrupt.id: interrupt}),
        )

    def _interrupt_id(self, state: RunState, node_id: str, hook: str, gate: HumanGate) -> str:
        """The id of a gate opening: ``RUN:NODE:HOOK``, or the one the answerer was given.

        A gate reached by the timeout of a gate of the same kind (spec review → parked)
        keeps the timed-out gate's id: one question, one id.
        """
        timed_out = state.nodes[node_id].payload.get("interrupt")
        prefix = f"{state.run_id}:{node_id}:"
        if isinstance(timed_out, str) and timed_out.startswith(prefix):
            earlier = self._prepared.gates.get((node_id, timed_out.removeprefix(prefix)))
            if earlier is not None and earlier.kind == gate.kind:
                return timed_out
        return prefix + hook

    # -- the effect ledger -----------------------------------------------------------

    def ledger_step(self, state: RunState, node_id: str, entry: LedgerEntry) -> StepRecord:
        """Commit ``entry`` to the node's step in flight: an ``intent`` or an ``effect`` step."""
        path = state.nodes[node_id].path
        if entry.index == RESERVE_INDEX:
            kind = RESERVE_STEP
        else:
            kind = "intent" if entry.result is None else "effect"
        return StepRecord(
            seq=state.seq + 1,
            time=self._now(),
            kind=kind,
            node=node_id,
            source=path,
            dest=path,
            status=state.status,
            ledger=entry,
        )

    def _first_unknown_outcome(self, state: RunState, due: Iterable[str]) -> StepRecord | None:
        nodes = state.nodes
        for node_id in due:
            if nodes[node_id].ledger:  # a step cut short: an effect's outcome may be unknown
                record = self.settle_reservation(state, node_id) or self.unknown_outcome(
                    state, node_id
                )
                if record is not None:
                    return record
        return None

    def settle_reservation(self, state: RunState, node_id: str) -> StepRecord | None:
        """Charge a reservation a crashed process left on a node due to run its action.

        Only a step in flight holds a reservation, and no action of this process has
        started for a node still due: the call that reserved may have been answered and
        charged, so it is charged at its reserved most and the reservation dropped
        (:mod:`phasegraph.run._spend`). ``None``: the node holds no reservation.
        """
        current = state.nodes[node_id]
        entry = reservation(current)
        if entry is None:
            return None
        charge = {kind: units for kind, units in reserved(entry).items() if units}
        node = replace(
            current,
            counters=_spent(current, charge) if charge else current.counters,
            ledger=tuple(e for e in current.ledger if e.index != RESERVE_INDEX),
        )
        event = {"kind": "reservation_charged", "node": node_id, "charged": charge}
        return self._record(
            state,
            node_id,
            node,
            kind=SETTLE_STEP,
            source=current.path,
            dest=current.path,
            result={"charged": charge, "effect_id": entry.id},
            events=(event,),
        )

    def unknown_outcome(self, state: RunState, node_id: str) -> StepRecord | None:
        """Ask about, or fail on, a ``once`` effect of the node whose outcome nobody knows.

        ``None`` when the node's policy lets its action deal with it (``retry``,
        ``reconcile``) or when every committed effect has its result.
        """
        entry = uncertain(state.nodes[node_id])
        if entry is None or entry.on_unknown not in (OnUnknown.ASK, OnUnknown.FAIL):
            return None
        if entry.on_unknown is OnUnknown.FAIL:
            # Failed as its action would have: the state's error handling applies.
            error = ActionError(f"{describe(entry)} (on_unknown: fail)", node_id=node_id)
            return self.action_failed(state, node_id, error, ())
        return self._waiting(state, effect_gate(entry, node_id, self._now()))

    def _settle_effect(
        self,
        state: RunState,
        interrupt: Interrupt,
        result: ActionResult,
        reply: Mapping[str, Any],
        remaining: Mapping[str, Interrupt],
    ) -> StepRecord:
        """Answer an uncertain effect: it happened (with its result), run it again, or fail."""
        node_id = interrupt.node
        current = state.nodes[node_id]
        settled = settle(current, interrupt, result)
        if isinstance(settled, RunError):
            return self.action_failed(state, node_id, settled, (reply,), interrupts=remaining)
        if isinstance(settled, ActionResult):  # the action's own effect happened
            return self.transition(
                state, node_id, settled, (reply,), kind="reply", interrupts=remaining
            )
        node = replace(current, status=NodeStatus.RUNNING, ledger=settled)
        return self._record(
            state,
            node_id,
            node,
            kind="reply",
            source=current.path,
            trigger=result.trigger,
            dest=current.path,
            result={"trigger": result.trigger, "payload": result.payload},
            events=(reply,),
            interrupts=remaining,
        )

    # -- the run's budget ------------------------------------------------------------

    def budget_out(
        self,
        state: RunState,
        node_id: str,
        error: SpendRefusedError,
        events: tuple[Mapping[str, Any], ...],
    ) -> StepRecord:
        """The node waits for more budget: the run's budget gate opens, or it joins it.

        One gate per run, however many nodes run out: a node that runs out while it is
        open is added to the nodes it names (:mod:`phasegraph.run._spend_gate`). What
        the step spent so far is charged to the node and its reservation dropped.
        """
        current = state.nodes[node_id]
        used = {kind: units for kind, units in error.used.items() if units}
        node = replace(
            current,
            status=NodeStatus.WAITING,
            counters=_spent(current, used) if used else current.counters,
            ledger=tuple(e for e in current.ledger if e.index != RESERVE_INDEX),
        )
        budget = self._prepared.definition.budget
        interrupt, opened = budget_interrupt(state, node_id, error, budget, self._now())
        interrupt = replace(interrupt, seq=interrupt.seq if not opened else state.seq + 1)
        said: dict[str, Any] = {"kind": "budget_waiting", "id": interrupt.id, "node": node_id}
        if opened:
            said = {"kind": f"{BUDGET_GATE}_request", "id": interrupt.id, **interrupt.payload}
        # What was refused, as replay feeds it again (the action's outcome, recorded).
        refused = {
            "asked": dict(error.asked),
            "left": dict(error.left),
            "used": dict(error.used),
            "message": error.message,
        }
        return self._record(
            state,
            node_id,
            node,
            kind="wait",
            source=node.path,
            dest=node.path,
            result={REFUSED: refused},
            events=(*events, said),
            interrupts=MappingProxyType({**state.interrupts, interrupt.id: interrupt}),
        )

    def _grant(
        self,
        state: RunState,
        interrupt: Interrupt,
        result: ActionResult,
        reply: Mapping[str, Any],
        remaining: Mapping[str, Interrupt],
    ) -> StepRecord:
        """Answer the budget gate: more budget, or stop.

        ``more`` raises the limit and runs the waiting nodes' calls again; ``stop``
        fails each waiting node, its dependents skipped.
        """
        granted = grant(state, interrupt, result)
        source = state.nodes[interrupt.node].path
        errors: tuple[ErrorRecord, ...] = ()
        if isinstance(granted, RunError):
            nodes: dict[str, NodeState] = {}
            now = self._now()
            for node_id in waiting(interrupt):
                current = state.nodes[node_id]
                nodes[node_id] = replace(
                    current,
                    status=NodeStatus.FAILED,
                    outcome=NodeOutcome.FAILED,
                    error=granted.message,
                    payload=EMPTY,
                )
                nodes.update(self._skipped(state, node_id))
                details = MappingProxyType({"outcome": str(NodeOutcome.FAILED)})
                errors += (
                    ErrorRecord(
                        time=now,
                        node=node_id,
                        state=current.state,
                        message=granted.message,
                        details=details,
                    ),
                )
        else:
            nodes = dict(granted)
        return StepRecord(
            seq=state.seq + 1,
            time=self._now(),
            kind="reply",
            node=interrupt.node,
            source=source,
            trigger=result.trigger,
            dest=source,
            result=MappingProxyType({"trigger": result.trigger, "payload": result.payload}),
            nodes=MappingProxyType(nodes),
            status=self._frontier_for(state).status(nodes, remaining),
            errors=errors,
            events=(reply,),
            interrupts=remaining,
        )

    def answer(
        self,
        state: RunState,
        interrupt_id: str,
        result: ActionResult,
        *,
        actor: Actor | None = None,
        step: int | None = None,
        trusted: bool = False,
        message: Mapping[str, Any] | None = None,
    ) -> StepRecord:
        """Fire a reply's trigger on the waiting node and close its interrupt.

        Args:
            state: The run state.
            interrupt_id: The gate answered.
            result: The reply.
            actor: Who answers (recorded on the step; ``None``: a trusted local caller).
            step: The step that opened the gate, as the answerer was shown it; ``None``:
                whichever opening of the gate is pending.
            trusted: The caller is local and trusted: the gate's reviewers do not
                restrict ``actor`` (who is still recorded).
            message: The inbox message this reply delivers (its ``id`` and
                ``position``), recorded on the reply's event.

        Raises:
            RunStateError: No such pending interrupt.
            StaleReplyError: ``step`` is not the step that opened the pending gate.
            NotAReviewerError: The gate names reviewers and ``actor`` is not one of them.
            IllegalTriggerError: The reply's trigger is not legal in the node's state.
        """
        interrupt = state.interrupts.get(interrupt_id)
        if interrupt is None:
            pending = ", ".join(state.interrupts) or "none"
            raise GateNotOpen(
                f"run {state.run_id!r} has no pending interrupt {interrupt_id!r} "
                f"(pending: {pending})",
                run_id=state.run_id,
            )
        if step is not None and step != interrupt.seq:
            raise stale_reply(state.run_id, interrupt_id, step, interrupt.seq)
        if not trusted and not admits(interrupt.reviewers, actor):
            raise not_a_reviewer(state.run_id, interrupt, actor)
        remaining = MappingProxyType(
            {k: v for k, v in state.interrupts.items() if k != interrupt_id}
        )
        reply = {
            "kind": f"{interrupt.kind}_reply",
            "id": interrupt_id,
            "trigger": result.trigger,
            "payload": dict(result.payload),
        }
        if message is not None:
            reply["message"] = dict(message)
        if interrupt.kind == OUTCOME_UNKNOWN:
            record = self._settle_effect(state, interrupt, result, reply, remaining)
        elif interrupt.kind == BUDGET_GATE:
            record = self._grant(state, interrupt, result, reply, remaining)
        else:
            record = self.transition(
                state, interrupt.node, result, (reply,), kind="reply", interrupts=remaining
            )
        return record if actor is None else replace(record, actor=actor)

    def rollback(
        self,
        state: RunState,
        node_id: str,
        back: RunState,
        gate: str,
        keys: Iterable[str],
    ) -> StepRecord:
        """Put a node back at the gate it waited at in ``back``, as if nothing since began.

        The node's state is ``back``'s, the gate ``gate`` is open again, and each data key
        in ``keys`` (what the node wrote since) holds ``back``'s value again (``None``
        for a key ``back`` had not). A ``rollback`` step: the message that discards the
        turn is delivered to the gate next.
        """
        node = back.nodes[node_id]
        data = {key: back.data.get(key) for key in sorted(keys)}
        data = {key: value for key, value in data.items() if state.data.get(key) != value}
        interrupts = MappingProxyType({**state.interrupts, gate: back.interrupts[gate]})
        event = {"kind": "rollback", "node": node_id, "gate": gate, "to": back.seq}
        return self._record(
            state,
            node_id,
            node,
            kind="rollback",
            source=state.nodes[node_id].path,
            dest=node.path,
            data=data,
            events=(event,),
            interrupts=interrupts,
        )

    def expire(self, state: RunState) -> StepRecord | None:
        """Fire ``timeout`` on the first interrupt whose deadline has passed, if any."""
        now = self._now()
        due = sorted(
            (i for i in state.interrupts.values() if i.deadline is not None and i.deadline <= now),
            key=lambda i: (i.deadline, i.id),
        )
        if not due:
            return None
        interrupt = due[0]
        timeout = ActionResult(
            trigger=TIMEOUT_TRIGGER, payload=MappingProxyType({"interrupt": interrupt.id})
        )
        try:
            return self.answer(state, interrupt.id, timeout)
        except RunError as exc:
            remaining = {k: v for k, v in state.interrupts.items() if k != interrupt.id}
            return self.node_failed(
                state, interrupt.node, exc, (), interrupts=MappingProxyType(remaining)
            )

    def migrate(
        self,
        state: RunState,
        result: Mapping[str, Any],
        nodes: Mapping[str, NodeState],
        actor: Actor | None = None,
    ) -> StepRecord:
        """Move the run to another definition (see :mod:`phasegraph.run._migrate`)."""
        return StepRecord(
            seq=state.seq + 1,
            time=self._now(),
            kind=MIGRATE,
            result=MappingProxyType(dict(result)),
            nodes=MappingProxyType(dict(nodes)),
            status=state.status,
            actor=actor,
        )

    def moved_to(self, prepared: PreparedGraph, plans: Mapping[str, Plan]) -> StepBuilder:
        """A builder of the next steps on ``prepared`` (a run migrated to it)."""
        return StepBuilder(prepared, self._clock, plans)

    def cancel(self, state: RunState, reason: str, actor: Actor | None = None) -> StepRecord:
        """Cancel every unfinished node and close every interrupt (``actor``: who asked)."""
        nodes = {
            node_id: replace(node, status=NodeStatus.CANCELLED, error=reason)
            for node_id, node in state.nodes.items()
            if not node.status.terminal
        }
        return StepRecord(
            seq=state.seq + 1,
            time=self._now(),
            kind="cancel",
            nodes=MappingProxyType(nodes),
            status=RunStatus.CANCELLED,
            interrupts=MappingProxyType({}),
            actor=actor,
            events=(
                {"kind": "cancelled", "message": reason},  # first: replay reads the reason here
                # An open gate is closed with its own reply event, so whoever waits on
                # its id (a reviewer, an event stream) learns it will not be answered.
                *(
                    {
                        "kind": f"{interrupt.kind}_reply",
                        "id": interrupt.id,
                        "trigger": None,
                        "cancelled": True,
                        "message": f"closed unanswered: the run was cancelled ({reason})",
                    }
                    for interrupt in state.interrupts.values()
                ),
            ),
        )

    # -- helpers -----------------------------------------------------------------------

    def _moved(
        self,
        node_id: str,
        current: NodeState,
        step: StepResult,
        *,
        steps: int,
        payload: Mapping[str, Any] = EMPTY,
        result: Any = None,
    ) -> NodeState:
        path, retried = step.position.path, current.retried
        root = self._prepared.workflow.nodes[node_id].machine
        if self._prepared.machines.retried(root, path):  # a call a later retry makes again
            retried = steps
        return NodeState(
            status=_STATUS_FOR_OUTCOME[step.outcome],
            path=path,
            outcome=step.outcome,
            counters=step.position.counters,
            steps=steps,
            payload=payload,
            result=result,
            retried=retried,
        )

    def _record(
        self,
        state: RunState,
        node_id: str,
        node: NodeState,
        *,
        kind: str,
        source: tuple[str, ...] = (),
        trigger: str | None = None,
        dest: tuple[str, ...] = (),
        result: dict[str, Any] | None = None,
        data: Mapping[str, Any] = EMPTY,
        events: tuple[Mapping[str, Any], ...] = (),
        logged: tuple[ErrorRecord, ...] = (),
        interrupts: Mapping[str, Interrupt] | None = None,
    ) -> StepRecord:
        # ``result`` is a fresh dict the record takes over (wrapped read-only, not copied).
        time = self._now()
        nodes = {node_id: node}
        errors = logged
        if node.status is _FAILED:
            nodes.update(self._skipped(state, node_id))
            message = node.error or _ended(node, trigger, result)
            # Keep what the step's action logged (e.g. an emergency) before the failure.
            errors = (
                *logged,
                ErrorRecord(
                    time=time,
                    node=node_id,
                    state=node.state,
                    message=message,
                    details=MappingProxyType({"outcome": str(node.outcome)}),
                ),
            )
        pending = state.interrupts if interrupts is None else interrupts
        status = self._frontier_for(state).status(nodes, pending)
        appended: Mapping[str, list[Any]] = EMPTY
        if data:
            data, appended = _split(state.data, data)
        return StepRecord(
            seq=state.seq + 1,
            time=time,
            kind=kind,
            node=node_id,
            source=source,
            trigger=trigger,
            dest=dest,
            result=MappingProxyType(result) if result else EMPTY,
            data=data,
            appended=appended,
            nodes=MappingProxyType(nodes),
            status=status,
            errors=errors,
            events=events,
            interrupts=interrupts,
        )

    def _skipped(self, state: RunState, failed: str) -> dict[str, NodeState]:
        return {
            node_id: NodeState(
                status=NodeStatus.SKIPPED, error=f"skipped: {failed!r} failed upstream"
            )
            for node_id in self._prepared.workflow.descendants(failed)
            if state.nodes[node_id].status is NodeStatus.PENDING
        }


def _split(
    before: Mapping[str, Any], data: Mapping[str, Any]
) -> tuple[Mapping[str, Any], Mapping[str, list[Any]]]:
    """A step's data as the record keeps it: lists it extended apart from keys it set.

    A key whose new value is its old list with items added at the end is recorded as
    those items only (``appended``), so a growing conversation costs each step what it
    adds, not its whole length.
    """
    if not data:
        return EMPTY, EMPTY
    appended = {}
    for key, value in data.items():
        items = extension(before.get(key), value)
        if items is not None:
            appended[key] = items
    if not appended:
        return data, EMPTY
    rest = {key: value for key, value in data.items() if key not in appended}
    return MappingProxyType(rest) if rest else EMPTY, MappingProxyType(appended)


_STDERR_CHARS: Final = 300
"""How much of a failed command's stderr an error message quotes (the record keeps more)."""


def _ended(node: NodeState, trigger: str | None, result: Mapping[str, Any] | None) -> str:
    """Why a node that reached a failing final state failed.

    The trigger that took it there and, for a command, how it exited and the end of what
    it wrote to stderr.
    """
    parts = [f"finished with outcome {node.outcome}"]
    if trigger:
        parts[0] += f" (trigger {trigger!r})"
    output = (result or {}).get("output") or {}
    payload = (result or {}).get("payload") or {}
    if isinstance(output, Mapping) and "exit" in output:
        argv = output.get("argv")
        command = f"command {str(argv[0])!r}" if isinstance(argv, list | tuple) else "command"
        if payload.get("timed_out"):
            parts.append(f"{command} was stopped at its timeout")
        else:
            parts.append(f"{command} exited with status {output['exit']}")
        stderr = str(output.get("stderr") or "").strip()
        if stderr:
            tail = stderr[-_STDERR_CHARS:]
            parts.append("stderr: " + ("..." if len(tail) < len(stderr) else "") + tail)
    elif isinstance(payload, Mapping) and payload.get("message"):
        parts.append(str(payload["message"]))
    return "; ".join(parts)


def _spent(node: NodeState, spend: Mapping[str, int]) -> Mapping[str, int]:
    """The node's counters with what an action spent added, at the action's level."""
    prefix = "".join(part + PATH_SEPARATOR for part in node.path[:-1])
    counters = dict(node.counters)
    for budget, units in spend.items():
        counters[prefix + budget] = counters.get(prefix + budget, 0) + int(units)
    return MappingProxyType(counters)
