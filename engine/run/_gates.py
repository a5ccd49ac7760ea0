"""A waiting run's open gates: what they accept, and why a reply to one is refused.

A reply applies once: it is bound to the gate's id and, when it quotes one, to the step
that opened the gate. A reply that finds no such gate open is refused with the reason
the run's history gives (:func:`refused_reply`): the gate was answered already (a
replayed reply: :class:`~phasegraph.errors.GateAnsweredError`), or the run moved on and
the gate is closed or open again at a later step (:class:`~phasegraph.errors.StaleReplyError`).
"""

from __future__ import annotations

from collections.abc import Iterable

from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.errors import (
    GateAnsweredError,
    NotAReviewerError,
    RunStateError,
    StaleReplyError,
)
from phasegraph.model import Actor, Interrupt, RunState, StepRecord
from phasegraph.run._effects import ANSWERS, OUTCOME_UNKNOWN
from phasegraph.run._prepare import PreparedGraph, with_plans
from phasegraph.run._spend_gate import ANSWERS as BUDGET_ANSWERS
from phasegraph.run._spend_gate import BUDGET_GATE
from phasegraph.run._stored import decode_history
from phasegraph.store.base import Store

__all__ = [
    "GateNotOpen",
    "answered",
    "gate_answers",
    "not_a_reviewer",
    "refused_reply",
    "stale_reply",
]


class GateNotOpen(RunStateError):
    """A reply found no such gate open: :func:`refused_reply` reads the history for why.

    Every other refusal of a reply (its payload, a reviewer, a trigger) is said as it is.
    """


def gate_answers(prepared: PreparedGraph | None, state: RunState) -> dict[str, tuple[str, ...]]:
    """Pending interrupt id → the triggers a reply may fire on it, in the gate's order.

    A gate's declared triggers that its state accepts, else every trigger the state
    accepts; ``timeout`` is left out (the deadline fires it) unless it is the only one.
    Empty for every interrupt when the graph could not be read (``prepared`` is ``None``)
    and for one whose node the graph no longer has. A gate of a plan's child is read from
    its plan's template. A gate that asks whether an uncertain effect happened takes its
    own answers (``happened``, ``run_again``, ``fail``).
    """
    prepared = _with_children(prepared, state)
    answers: dict[str, tuple[str, ...]] = {}
    for interrupt_id, interrupt in state.interrupts.items():
        if interrupt.kind == OUTCOME_UNKNOWN:
            answers[interrupt_id] = ANSWERS
            continue
        if interrupt.kind == BUDGET_GATE:
            answers[interrupt_id] = BUDGET_ANSWERS
            continue
        node = state.nodes.get(interrupt.node)
        workflow_node = None if prepared is None else prepared.workflow.nodes.get(interrupt.node)
        if prepared is None or node is None or workflow_node is None:
            answers[interrupt_id] = ()
            continue
        machine = workflow_node.machine
        legal = prepared.machines.legal_triggers(machine, node.path)
        hook = prepared.machines.hook(machine, node.path) or ""
        gate = prepared.gates.get((interrupt.node, hook))
        declared = gate.triggers if gate is not None and gate.triggers else legal
        accepted = tuple(t for t in dict.fromkeys(declared) if t in legal)
        answers[interrupt_id] = tuple(t for t in accepted if t != TIMEOUT_TRIGGER) or accepted
    return answers


def _with_children(prepared: PreparedGraph | None, state: RunState) -> PreparedGraph | None:
    """``prepared`` with the children of the run's plans, when a gate is open on one."""
    if prepared is None or not state.plans:
        return prepared
    nodes = prepared.workflow.nodes
    if all(interrupt.node in nodes for interrupt in state.interrupts.values()):
        return prepared
    try:
        return with_plans(prepared, state.plans)
    except RunStateError:
        # A definition changed since the run started may no longer make these children:
        # their gates' answers are unknown, as for a node the graph no longer has.
        return prepared


def not_a_reviewer(run_id: str, interrupt: Interrupt, actor: Actor | None) -> NotAReviewerError:
    """The refusal of ``actor``'s reply to a gate that names other reviewers."""
    who = "nobody" if actor is None else repr(actor.name)
    return NotAReviewerError(
        f"run {run_id!r}: gate {interrupt.id!r} may be answered only by "
        f"{', '.join(interrupt.reviewers)}; {who} is not one of them",
        gate=interrupt.id,
        reviewers=interrupt.reviewers,
        actor="" if actor is None else actor.name,
        run_id=run_id,
    )


def stale_reply(run_id: str, gate: str, step: int, current: int | None) -> StaleReplyError:
    """The refusal of a reply for the opening of ``gate`` at ``step``, now past."""
    now = (
        f"the gate pending now was opened at step {current}"
        if current is not None
        else "the gate is no longer open"
    )
    return StaleReplyError(
        f"run {run_id!r}: the reply is for gate {gate!r} as opened at step {step}, but {now}: "
        "the run moved on; read the gate again and answer what it asks now",
        gate=gate,
        step=step,
        current=current,
        run_id=run_id,
    )


def answered(records: Iterable[StepRecord], gate: str, step: int | None) -> StepRecord | None:
    """The step that answered ``gate`` as opened at ``step`` (``None``: its last answer).

    Its first ``reply`` step after ``step``, or the last one of ``records`` when no step
    is given; a deadline that fired is an answer too (its trigger is ``timeout``).
    """
    found = None
    for record in records:
        if record.kind != "reply" or (step is not None and record.seq <= step):
            continue
        if any(event.get("id") == gate and event.get("trigger") for event in record.events):
            if step is not None:
                return record
            found = record
    return found


async def refused_reply(
    store: Store, state: RunState, gate: str, step: int | None, error: RunStateError
) -> RunStateError:
    """Why a reply to ``gate`` (opened at ``step``, if quoted) found no such gate open.

    Read from the run's history only when a reply is refused: the step that answered
    that opening makes a :class:`GateAnsweredError`; a quoted step that nothing answered
    a :class:`StaleReplyError`; otherwise ``error`` itself (the gate never opened).
    Any other refusal (a reviewer refused, an illegal trigger) is ``error`` as it is.
    """
    if not isinstance(error, GateNotOpen | StaleReplyError):
        return error
    run_id = state.run_id
    start = 0 if step is None else step + 1
    if start > state.seq:
        records: list[StepRecord] = []
    else:
        stored = [item async for item in store.history(run_id, start=start)]
        records = decode_history(run_id, stored, start)
    record = answered(records, gate, step)
    if record is not None:
        by = None if record.actor is None else record.actor.name
        if by is not None:
            how = f"by {by!r}"
        elif record.trigger == TIMEOUT_TRIGGER:
            how = "by its deadline"
        else:
            how = "by a local caller"
        return GateAnsweredError(
            f"run {run_id!r}: gate {gate!r} was answered already, at step {record.seq} "
            f"({record.trigger}) {how}: a reply applies once",
            gate=gate,
            answered_at=record.seq,
            answered_by=by,
            run_id=run_id,
        )
    if step is not None and not isinstance(error, StaleReplyError):
        pending = state.interrupts.get(gate)
        return stale_reply(run_id, gate, step, None if pending is None else pending.seq)
    return error
