"""Stateful hypothesis tests generated from a machine: one rule per trigger.

:func:`machine_state_machine` builds a ``RuleBasedStateMachine`` whose rules are the
machine's triggers (each with any truth values for the ``payload:`` predicates it reads),
fired through the engine's own stepping (:class:`phasegraph.core.MachineSet`), so nested
machines, budgets and guards behave exactly as in a run. A rule runs only when its
trigger is declared from the current state; a node that finishes starts again. Built in:
every step reaches a declared state, no budget is exceeded, and no trigger the state
declares is refused by every guard. Subclass it to add your own invariants::

    from hypothesis.stateful import invariant
    from phasegraph.testing import machine_state_machine

    class Review(machine_state_machine("states/review.yaml")):
        @invariant()
        def never_ships_unreviewed(self) -> None:
            assert not (self.outcome == "success" and "review" not in self.visited)

    TestReview = Review.TestCase

Failures read as the path the node took (``planning --submit--> review/pending``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from phasegraph.analysis._check import machine_family
from phasegraph.core._machine import MachineSet, Position, compile_machines
from phasegraph.errors import BudgetExhaustedError, IllegalTriggerError
from phasegraph.model import PATH_SEPARATOR, MachineDef
from phasegraph.testing._runs import PropertyFailed

__all__ = ["MachineStateMachine", "machine_state_machine"]

_NODE = "stateful"


class MachineStateMachine(RuleBasedStateMachine):
    """The base of generated machines: the position, the path taken, the outcome.

    Attributes:
        root: The machine's name.
        machines: The machine and those it nests, compiled.
        settings: The node's ``with`` settings the guards see.
        position: Where the node stands (state path and spent budgets).
        outcome: The outcome of the last finish, or ``None`` while running.
        moves: The path taken since the last start, as text.
        visited: Every state path entered since the last start.
    """

    root: str = ""
    machines: MachineSet
    definitions: Mapping[str, MachineDef] = MappingProxyType({})
    settings: Mapping[str, Any] = MappingProxyType({})

    def __init__(self) -> None:
        super().__init__()
        self.outcome: str | None = None
        self.moves: list[str] = []
        self.visited: list[str] = []
        self.position = self._start()

    def _start(self) -> Position:
        result = self.machines.start(self.root, _NODE, self.settings)
        self.outcome = None if result.outcome is None else str(result.outcome)
        path = PATH_SEPARATOR.join(result.position.path)
        self.moves = [path]
        self.visited = [path]
        return result.position

    @property
    def state(self) -> str:
        """The current state path (``parent/child``)."""
        return PATH_SEPARATOR.join(self.position.path)

    def legal(self) -> tuple[str, ...]:
        """Triggers declared from the current innermost state."""
        return self.machines.legal_triggers(self.root, self.position.path)

    def fire(self, trigger: str, payload: Mapping[str, bool]) -> None:
        """Fire ``trigger``; a refusal by every guard fails with the path taken."""
        __tracebackhide__ = True
        try:
            result = self.machines.step(
                self.root,
                self.position,
                trigger,
                node_id=_NODE,
                settings=self.settings,
                payload=payload,
            )
        except (IllegalTriggerError, BudgetExhaustedError) as exc:
            shown = {k: v for k, v in payload.items()}
            raise PropertyFailed(
                f"machine {self.root!r}: trigger {trigger!r} (payload {shown}) in state "
                f"{self.state!r} is refused: {exc}\n  its path: {' '.join(self.moves)} "
                f"--{trigger}--> refused"
            ) from None
        self.position = result.position
        self.moves.append(f"--{trigger}--> {self.state}")
        self.visited.append(self.state)
        if result.outcome is not None:
            self.outcome = str(result.outcome)

    @precondition(lambda self: self.outcome is not None)
    @rule()
    def start_again(self) -> None:
        """A node that finished starts over (so runs go on past a final state)."""
        self.position = self._start()

    @invariant()
    def budgets_within_limits(self) -> None:
        """No budget of the current level is spent past its limit."""
        __tracebackhide__ = True
        levels = self.machines.levels(self.root, self.position.path)
        prefix = PATH_SEPARATOR.join(self.position.path[:-1])
        limits = levels[-1].limits(self.settings)
        for budget, limit in limits.items():
            key = f"{prefix}{PATH_SEPARATOR}{budget}" if prefix else budget
            spent = self.position.counters.get(key, 0)
            if spent > limit:
                raise PropertyFailed(
                    f"machine {self.root!r}: budget {key!r} spent {spent} times, more than "
                    f"its limit {limit}\n  its path: {' '.join(self.moves)}"
                )


def _trigger_rule(trigger: str, keys: list[str]) -> Callable[..., None]:
    payload = st.fixed_dictionaries({key: st.booleans() for key in keys})

    def fire(self: MachineStateMachine, payload: Mapping[str, bool]) -> None:
        self.fire(trigger, payload)

    fire.__name__ = fire.__qualname__ = _rule_name(trigger)
    guarded = precondition(lambda self: self.outcome is None and trigger in self.legal())(fire)
    return rule(payload=payload)(guarded)


def _rule_name(trigger: str) -> str:
    return "fire_" + "".join(c if c.isalnum() else "_" for c in trigger)


def machine_state_machine(
    source: str | Path, *, settings: Mapping[str, Any] | None = None
) -> type[MachineStateMachine]:
    """A ``RuleBasedStateMachine`` for a machine (a built-in name or a file).

    Args:
        source: The machine.
        settings: The node's ``with`` settings (for ``setting:`` guards and budgets).

    Returns:
        A class to subclass (add ``@invariant()`` methods) or to run as ``.TestCase``.
    """
    root, family = machine_family(source)
    triggers: dict[str, set[str]] = {}
    for machine in family.values():
        for transition in machine.transitions:
            triggers.setdefault(transition.trigger, set()).update(
                p.partition(":")[2]
                for p in (*transition.conditions, *transition.unless)
                if p.startswith("payload:")
            )
    namespace: dict[str, Any] = {
        "root": root.name,
        "machines": compile_machines(family),
        "definitions": MappingProxyType(dict(family)),
        "settings": MappingProxyType(dict(settings or {})),
    }
    for trigger, keys in sorted(triggers.items()):
        namespace[_rule_name(trigger)] = _trigger_rule(trigger, sorted(keys))
    name = "".join(part.title() for part in root.name.split("_")) + "Machine"
    return type(name, (MachineStateMachine,), namespace)
