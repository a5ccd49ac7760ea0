"""What a waiting run's open gates accept: the answers ``status`` and ``GET /runs/ID`` show."""

from __future__ import annotations

from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.model import RunState
from phasegraph.run._effects import ANSWERS, OUTCOME_UNKNOWN
from phasegraph.run._prepare import PreparedGraph

__all__ = ["gate_answers"]


def gate_answers(prepared: PreparedGraph | None, state: RunState) -> dict[str, tuple[str, ...]]:
    """Pending interrupt id → the triggers a reply may fire on it, in the gate's order.

    A gate's declared triggers that its state accepts, else every trigger the state
    accepts; ``timeout`` is left out (the deadline fires it) unless it is the only one.
    Empty for every interrupt when the graph could not be read (``prepared`` is ``None``)
    and for one whose node the graph no longer has. A gate that asks whether an
    uncertain effect happened takes its own answers (``happened``, ``run_again``, ``fail``).
    """
    answers: dict[str, tuple[str, ...]] = {}
    for interrupt_id, interrupt in state.interrupts.items():
        if interrupt.kind == OUTCOME_UNKNOWN:
            answers[interrupt_id] = ANSWERS
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
