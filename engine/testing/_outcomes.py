"""Scripted action outcomes: hypothesis strategies and the in-code actions that play them.

A :data:`Script` gives each node of a graph a list of :class:`Outcome` values. The action
:func:`scripted_actions` binds to every hook of a node answers its ``k``-th step with
outcome ``k`` (modulo the script's length): the ``choice``-th of the triggers legal in
the node's current state that the bound action declares (``error`` included when the
state accepts it, as if the action raised), with the ``payload:`` values the outcome
holds. Answers depend only on the committed step count, so a resumed run gets the same
answers as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hypothesis import strategies as st

from phasegraph.actions import Action, ActionContext, ActionResult
from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.core._machine import MachineSet, compile_machines
from phasegraph.errors import ActionError
from phasegraph.model import PATH_SEPARATOR, GraphDef, MachineDef, NodeDef, nested_machines

__all__ = [
    "Outcome",
    "Script",
    "graph_outcomes",
    "outcomes",
    "scripted_actions",
]

_CHOICES = 16  # enough to pick any trigger of any sane state; shrinks towards 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One result a scripted action returns.

    Attributes:
        choice: Which legal trigger, as an index into the sorted legal triggers of the
            state the action runs in (taken modulo their number).
        payload: Truth values for ``payload:`` predicates (only the keys that the chosen
            trigger's transitions read are sent).
    """

    choice: int
    payload: Mapping[str, bool] = field(default_factory=dict)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.payload.items() if v}
        return f"Outcome({self.choice}" + (f", payload={shown}" if shown else "") + ")"


Script = Mapping[str, tuple[Outcome, ...]]
"""Node id → the outcomes its actions return, in order (used again from the start when
the node takes more steps than the script has outcomes)."""


def _payload_keys(machines: Iterable[MachineDef]) -> list[str]:
    keys = {
        predicate.partition(":")[2]
        for machine in machines
        for transition in machine.transitions
        for predicate in (*transition.conditions, *transition.unless)
        if predicate.startswith("payload:")
    }
    return sorted(keys)


def outcomes(
    machines: Iterable[MachineDef], *, max_steps: int = 12
) -> st.SearchStrategy[tuple[Outcome, ...]]:
    """Scripts for one node whose machine (with those it nests) is ``machines``."""
    payload = st.fixed_dictionaries({key: st.booleans() for key in _payload_keys(machines)})
    outcome = st.builds(Outcome, choice=st.integers(0, _CHOICES - 1), payload=payload)
    return st.lists(outcome, min_size=1, max_size=max_steps).map(tuple)


def graph_outcomes(definition: GraphDef, *, max_steps: int = 12) -> st.SearchStrategy[Script]:
    """Scripts for every node of a graph (or of :func:`machine_properties`' one-node graph)."""
    return st.fixed_dictionaries(
        {
            node.id: outcomes(
                nested_machines(node.machine, definition.machines), max_steps=max_steps
            )
            for node in definition.nodes
        }
    )


# --------------------------------------------------------------------------- actions


class _Scripted:
    """The in-code action of one node: answers from the script, by the node's step count."""

    def __init__(self, machines: MachineSet, node: NodeDef, script: tuple[Outcome, ...]):
        self._machines = machines
        self._node = node
        self._script = script

    def legal(self, path: tuple[str, ...]) -> tuple[str, ...]:
        """What the action may return in ``path``: accepted and declared, or ``error``."""
        accepted = self._machines.legal_triggers(self._node.machine, path)
        hook = self._machines.hook(self._node.machine, path) or ""
        binding = self._node.bind.get(hook)
        if binding is None or not binding.triggers:
            return accepted
        return tuple(t for t in accepted if t in binding.triggers or t == ERROR_TRIGGER)

    def payload_keys(self, path: tuple[str, ...], trigger: str) -> list[str]:
        """The ``payload:`` keys the transitions of ``trigger`` from ``path`` read."""
        machine = self._machines.levels(self._node.machine, path)[-1].definition
        return [
            p.partition(":")[2]
            for t in machine.transitions
            if t.trigger == trigger and path[-1] in t.source
            for p in (*t.conditions, *t.unless)
            if p.startswith("payload:")
        ]

    async def __call__(self, ctx: ActionContext) -> ActionResult:
        path = tuple(ctx.state.split(PATH_SEPARATOR))
        legal = self.legal(path)
        if not legal:
            raise ActionError(f"state {ctx.state!r} accepts no trigger this action may return")
        # By committed step count, not by call count: a resumed run asks again and must
        # get the same answer.
        outcome = self._script[ctx.steps % len(self._script)]
        trigger = legal[outcome.choice % len(legal)]
        keys = self.payload_keys(path, trigger)
        return ActionResult(
            trigger=trigger, payload={k: outcome.payload.get(k, False) for k in keys}
        )


def scripted_actions(definition: GraphDef, script: Script) -> dict[tuple[str, str], Action]:
    """In-code actions for every hook of every node, answering from ``script``.

    Pass them to :func:`phasegraph.run.prepare` (``actions=``) to run a graph without
    its real actions.
    """
    machines = definition.machines
    compiled = compile_machines(machines)  # for queries only: legal triggers and hooks
    actions: dict[tuple[str, str], Action] = {}
    for node in definition.nodes:
        scripted = _Scripted(compiled, node, script[node.id])
        hooks = {s.hook for m in nested_machines(node.machine, machines) for s in m.states.values()}
        actions.update({(node.id, hook): scripted for hook in hooks if hook})
    return actions
