"""``once`` effects a machine makes again: a retry (same effect id) or a new attempt (new id).

An action's effect id is ``run:node:step``, so each entry into a state is a new call
with a new id, unless the state declares ``retries: STATE`` (a recovery's retry), whose
action keeps the retried call's ids. For a ``once`` action (an ``http:`` POST, a binding
with ``effect: once``) the difference is money: a receiver that deduplicates on
``Idempotency-Key`` sees a retry as the call it already made, and a new attempt as a new
call. ``check`` names each path on which a machine runs a ``once`` hook again: a warning
when it is a new attempt (a retry the author forgot to declare makes a second invoice),
a note when it is a declared retry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from phasegraph.actions._effects import EffectPolicy
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.errors import SourceLocation
from phasegraph.model import Effect, GraphDef, MachineDef, NodeDef, nested_machines

__all__ = ["once_again_findings"]

_ACTION_KINDS = frozenset({"python", "shell", "http"})
"""Bindings whose own effect the policy describes (a ``tools:`` call is one per turn)."""


def once_again_findings(
    definition: GraphDef, effects: Mapping[tuple[str, str], EffectPolicy]
) -> list[Finding]:
    """A finding per node, ``once`` hook and state on which its machine runs it again."""
    findings: list[Finding] = []
    for node in definition.nodes:
        for hook, action in node.bind.items():
            policy = effects.get((node.id, hook))
            if action.kind not in _ACTION_KINDS or policy is None:
                continue
            if policy.effect is not Effect.ONCE:
                continue
            for machine in nested_machines(node.machine, definition.machines):
                findings += _machine_findings(node, hook, policy, machine)
    return findings


def _machine_findings(
    node: NodeDef, hook: str, policy: EffectPolicy, machine: MachineDef
) -> list[Finding]:
    hooked = [name for name, state in machine.states.items() if state.hook == hook]
    findings = []
    for again in hooked:
        path = _shortest(machine, hooked, again)
        if path is None:
            continue
        loop = " -> ".join(path)
        retried = machine.states[again].retries
        where = node.bind[hook].location
        if retried is not None:
            text = (
                f"node {node.id!r}: the once effect bound to hook {hook!r} is retried on "
                f"{loop} (machine {machine.name!r}) with the same effect id, as state "
                f"{again!r} declares `retries: {retried}`: a receiver that deduplicates on "
                f"Idempotency-Key (PHASEGRAPH_EFFECT_ID) sees one call; a crash in between "
                f"is settled by on_unknown: {policy.on_unknown}"
            )
            findings.append(_finding(Severity.NOTE, text, where))
            continue
        text = (
            f"node {node.id!r}: the once effect bound to hook {hook!r} runs again on "
            f"{loop} (machine {machine.name!r}) as a new attempt, with a new effect id "
            f"(Idempotency-Key): a receiver cannot tell it from a new call, so a failed call "
            f"that had done its work is done twice. If the loop retries the same call, "
            f"declare `retries: {path[0]}` on state {again!r}; if each entry is a new "
            f"call, make the hook `effect: idempotent` or accept it (on_unknown: "
            f"{policy.on_unknown} applies to each attempt)"
        )
        findings.append(_finding(Severity.WARNING, text, where))
    return findings


def _finding(severity: Severity, text: str, where: SourceLocation | None) -> Finding:
    return Finding(severity=severity, code=Code.ONCE_AGAIN, message=text, location=where)


def _shortest(machine: MachineDef, hooked: list[str], target: str) -> list[str] | None:
    """The shortest path of one step or more from a state of ``hooked`` to ``target``."""
    edges: dict[str, list[str]] = {}
    for transition in machine.transitions:
        for source in transition.source:
            edges.setdefault(source, []).append(transition.dest)
    queue = deque([start] for start in hooked)
    seen: set[str] = set()
    while queue:
        path = queue.popleft()
        for dest in edges.get(path[-1], ()):
            if dest == target:
                return [*path, dest]
            if dest not in seen and dest not in hooked:
                seen.add(dest)
                queue.append([*path, dest])
    return None
