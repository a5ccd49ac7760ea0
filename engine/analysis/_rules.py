"""The rules of ``phasegraph check``: findings about machines and graphs that load.

Files the loader rejects never reach these rules (:mod:`phasegraph.analysis._check` reports the
loader's problems instead); definitions built in code can break any rule. The rules
look at each machine as a graph of its states (see :mod:`phasegraph.analysis._flow`):

========================  ========  =====================================================
code                      severity  meaning
========================  ========  =====================================================
``unreachable-state``     warning   no path from the initial state leads to it
``no-final-path``         error     a node that reaches it can never finish
``unbounded-cycle``       warning   a loop no budget bounds: a run may never end (error
                                    when nothing leads out of the loop)
``outcome-not-accepted``  error     a nested machine can end with an outcome its state
                                    has no transition for
``hook-cannot-leave``     error     the bound action declares only triggers that do not
                                    lead out of its state
``trigger-not-accepted``  error     a bound action declares a trigger its state refuses
``unbound-hook``          error     a hook no action is bound to
``unknown-budget``        error     a ``budget:`` predicate names no declared budget
``dag-cycle``             error     nodes that need each other
``success-forbidden-      error     the tool rules take away ``advance`` where it is the
by-tool-rules``                     only way to succeed (:mod:`._phase_rules`)
``misnamed-outcome``      warning   a final ``success`` state named like a failure that
                                    only failure triggers reach (:mod:`._intent`)
``entry-only-spend``      warning   a budget spent only on states no transition enters
``payload-not-carried``   error     an llm template reads ``{payload[KEY]}`` in a state
                                    also entered without ``KEY`` (:mod:`._payloads`)
``payload-guard-          warning   a ``payload:KEY`` condition no action bound to its
unsatisfiable``                     sources can satisfy (:mod:`._payloads`)
========================  ========  =====================================================

A loop is bounded when one of its states is in some budget's ``spend_on``: the engine
refuses to enter such a state once its budget is spent, so the loop ends. The same fact
gives :func:`step_bound`, the most steps a node can take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phasegraph.analysis._explore import Explorer as SpaceExplorer
from phasegraph.analysis._explore import setting_keys
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.analysis._flow import Explored, Explorer, cycle_through, loops
from phasegraph.analysis._intent import intent_findings
from phasegraph.analysis._messages import message_findings
from phasegraph.analysis._payloads import payload_findings
from phasegraph.analysis._phase_rules import advance_findings
from phasegraph.analysis._proofs import Proofs, machine_proofs, node_proofs
from phasegraph.core._graph import find_cycle
from phasegraph.core._plans import item_settings, plan_templates
from phasegraph.errors import SourceLocation
from phasegraph.model import EMPTY, GraphDef, MachineDef, NodeDef

__all__ = [
    "Code",
    "Finding",
    "Severity",
    "analyze_graph",
    "analyze_machine",
    "step_bound",
]


# --------------------------------------------------------------------------- machines


def _error(code: Code, message: str, where: SourceLocation | None) -> Finding:
    return Finding(severity=Severity.ERROR, code=code, message=message, location=where)


def _warning(code: Code, message: str, where: SourceLocation | None) -> Finding:
    return Finding(severity=Severity.WARNING, code=code, message=message, location=where)


def _budget_findings(machine: MachineDef) -> list[Finding]:
    """Predicates and spend lists naming what the machine does not declare."""
    findings = []
    for transition in machine.transitions:
        for predicate in (*transition.conditions, *transition.unless):
            kind, _, named = predicate.partition(":")
            if kind == "budget" and named not in machine.budgets:
                known = ", ".join(machine.budgets) or "none declared"
                text = f"predicate {predicate!r} names unknown budget {named!r} (budgets: {known})"
                findings.append(_error(Code.UNKNOWN_BUDGET, text, transition.location))
    for budget in machine.budgets.values():
        for state in budget.spend_on:
            if state not in machine.states:
                text = f"budget {budget.name!r} is spent on unknown state {state!r}"
                findings.append(_error(Code.INVALID, text, machine.location))
    return findings


def _reach_findings(
    machine: MachineDef, explored: Explored, *, finals_proved: bool = False
) -> list[Finding]:
    """Unreachable states, and reachable states from which no final state can be reached."""
    findings = []
    if not any(state.final for state in machine.states.values()):
        text = (
            f"machine {machine.name!r} has no final state: add one, e.g. `done: {{final: success}}`"
        )
        return [_error(Code.NO_FINAL, text, machine.location)]
    for state in machine.states.values():
        if state.name not in explored.reachable:
            if finals_proved and state.final is not None:
                continue  # reported as an unreachable outcome by exploration
            text = (
                f"state {state.name!r} of machine {machine.name!r} cannot be reached from "
                f"{machine.initial!r}: add a transition into it or remove it"
            )
            findings.append(_warning(Code.UNREACHABLE, text, state.location))
        elif state.name not in explored.finishing:
            text = (
                f"state {state.name!r} of machine {machine.name!r} has no path to a final "
                "state: a node that reaches it never finishes; add a transition towards a "
                "final state"
            )
            findings.append(_error(Code.NO_FINAL, text, state.location))
    return findings


def _loop_findings(machine: MachineDef, explored: Explored) -> list[Finding]:
    """Loops among reachable states that no budget bounds."""
    spent = {state for budget in machine.budgets.values() for state in budget.spend_on}
    free = [
        s.name
        for s in machine.states.values()
        if s.name in explored.reachable and s.name not in spent and s.final is None
    ]
    findings = []
    for loop in loops(free, explored.edges):
        cycle = cycle_through(loop, explored.edges)
        path = " -> ".join(cycle)
        if set(cycle) != set(loop):
            path = f"among {', '.join(loop)} (e.g. {path})"
        first = machine.states[loop[0]]
        exits = any(dest not in loop for state in loop for dest in explored.edges[state])
        text = (
            f"machine {machine.name!r} loops {path} and no budget bounds the loop, so a run may "
            f"never end: list one of these states in a budget's spend_on, e.g. `budgets: "
            f"{{attempts: {{limit: 3, spend_on: [{first.name}]}}}}`"
        )
        if exits:
            findings.append(_warning(Code.UNBOUNDED, text, first.location))
        else:
            text += "; nothing leads out of this loop, so a node that enters it never finishes"
            findings.append(_error(Code.UNBOUNDED, text, first.location))
    return findings


def _nesting_findings(explorer: Explorer, machine: MachineDef, explored: Explored) -> list[Finding]:
    """Outcomes a nested machine can end with that its state has no transition for."""
    findings = []
    for state in machine.states.values():
        if state.machine is None or state.name not in explored.reachable:
            continue
        child = explorer.explore(state.machine)
        accepted = {t.trigger for t in machine.transitions if state.name in t.source}
        for outcome, final in sorted(child.outcomes.items()):
            if outcome not in accepted:
                text = (
                    f"state {state.name!r} nests machine {state.machine!r}, which can end in "
                    f"{final!r} with outcome {outcome!r}, but {state.name!r} has no transition "
                    f"on trigger {outcome!r}: the node would fail there; add `{{trigger: "
                    f"{outcome}, source: {state.name}, dest: ...}}`"
                )
                findings.append(_error(Code.OUTCOME_NOT_ACCEPTED, text, state.location))
    return findings


_NODE_KINDS = frozenset({"gap", "live", "loop"})
"""Proof kinds that depend on how a node sets a machine up: in a graph, each node's own
exploration (its settings, budgets and bindings) reports them, not the machine's."""


def _machine_findings(
    explorer: Explorer, spaces: SpaceExplorer, machine: MachineDef, *, in_graph: bool = False
) -> tuple[list[Finding], Proofs]:
    explored = explorer.explore(machine.name)
    budget_findings = _budget_findings(machine)
    # Guards naming what is not declared cannot be evaluated: report those alone.
    proofs = (
        Proofs({}, complete=False)
        if budget_findings
        else machine_proofs(spaces, machine, explored.reachable)
    )
    proved = [
        finding
        for key, finding in proofs.findings.items()
        # A state the flat rules already show cannot finish is reported once, by them.
        if not (key[0] == "live" and key[2] not in explored.finishing)
        and not (in_graph and key[0] in _NODE_KINDS)
    ]
    findings = [
        *budget_findings,
        *_reach_findings(machine, explored, finals_proved=proofs.complete),
        *_nesting_findings(explorer, machine, explored),
        *intent_findings(machine),
        *proved,
    ]
    if not proofs.complete:  # exploration could not prove loops bounded or not
        findings += _loop_findings(machine, explored)
    return findings, proofs


def analyze_machine(name: str, machines: Mapping[str, MachineDef]) -> list[Finding]:
    """Analyse machine ``name`` and every machine nested in it.

    Args:
        name: The machine to analyse.
        machines: Every machine by name (the machine itself and those it nests).

    Returns:
        The findings, in no particular order.
    """
    explorer = Explorer(machines)
    spaces = SpaceExplorer(machines)
    return [
        f
        for m in explorer.family(name)
        for f in _machine_findings(explorer, spaces, machines[m])[0]
    ]


# --------------------------------------------------------------------------- graphs


def analyze_graph(definition: GraphDef) -> list[Finding]:
    """Analyse a graph: its DAG, every machine it uses, and each node's bindings.

    Returns:
        The findings, in no particular order.
    """
    findings: list[Finding] = []
    cycle = find_cycle(definition.nodes)
    if cycle is not None:
        where = next(n.location for n in definition.nodes if n.id == cycle[0])
        text = f"dependency cycle: {' -> '.join(cycle)}; remove one of these `needs`"
        findings.append(_error(Code.DAG_CYCLE, text, where))
    explorer = Explorer(definition.machines)
    spaces = SpaceExplorer(definition.machines)
    known: set[tuple[str, ...]] = set()
    for machine in definition.machines.values():
        found, proofs = _machine_findings(explorer, spaces, machine, in_graph=True)
        findings += found
        known |= {key for key in proofs.findings if key[0] not in _NODE_KINDS}
    for node in definition.nodes:
        if node.machine not in definition.machines:
            text = f"node {node.id!r} uses unknown machine {node.machine!r}"
            findings.append(_error(Code.UNKNOWN_MACHINE, text, node.location))
            continue
        findings += _node_findings(node, definition, explorer, known)
    for template, action in plan_templates(definition.nodes):
        if template.machine in definition.machines:  # else the loader said so already
            # Settings a plan's items may carry are unknown here: the machine alone was
            # explored under every truth of its `setting:` guards (above).
            guarded = setting_keys([definition.machines[template.machine]])
            guessed = bool(item_settings(action) & {key.split(".")[0] for key in guarded})
            findings += _node_findings(template, definition, explorer, known, proofs=not guessed)
    findings += payload_findings(definition)
    return findings + message_findings(definition, spaces)


def _node_findings(
    node: NodeDef,
    definition: GraphDef,
    explorer: Explorer,
    known: set[tuple[str, ...]],
    *,
    proofs: bool = True,
) -> list[Finding]:
    """A node's bindings, whether it can finish with them, and its proofs with its settings.

    ``proofs``: prove the node with its settings as they are (not for a plan's template
    whose items set settings the machine's guards read: those are not known yet).
    """
    findings = _binding_findings(node, explorer)
    flow = _node_flow_findings(node, definition, explorer.explore(node.machine))
    flow += advance_findings(node, definition)
    findings += flow
    if not flow and proofs:  # a node that cannot finish even ignoring guards says enough
        findings += node_proofs(node, definition.machines, known.__contains__)
    return findings


def _binding_findings(node: NodeDef, explorer: Explorer) -> list[Finding]:
    """Unbound and unknown hooks, refused triggers, and actions that cannot leave."""
    sites = explorer.hook_sites(node.machine)
    findings = [
        _error(
            Code.UNBOUND_HOOK,
            f"node {node.id!r} leaves hook {hook!r} unbound (state "
            f"{', '.join(repr(site.path) for site in carriers)} of machine {node.machine!r} "
            "has it): bind it to an action",
            node.location,
        )
        for hook, carriers in sites.items()
        if hook not in node.bind
    ]
    for hook, action in node.bind.items():
        if hook not in sites:
            text = (
                f"node {node.id!r} binds hook {hook!r}, which machine {node.machine!r} does "
                "not have: remove the binding or fix its name"
            )
            findings.append(_error(Code.UNKNOWN_HOOK, text, action.location))
            continue
        for site in sites[hook]:
            refused = [t for t in action.triggers if t not in site.accepted]
            for trigger in refused:
                text = (
                    f"node {node.id!r}: the action bound to hook {hook!r} declares trigger "
                    f"{trigger!r}, which state {site.path!r} does not accept (it accepts: "
                    f"{', '.join(sorted(site.accepted)) or 'nothing'})"
                )
                findings.append(_error(Code.TRIGGER_NOT_ACCEPTED, text, action.location))
            if action.triggers and not set(action.triggers) & site.leaving:
                text = (
                    f"node {node.id!r}: the action bound to hook {hook!r} declares only "
                    f"{', '.join(map(repr, action.triggers))}, none of which leads out of state "
                    f"{site.path!r}: the node can never leave it"
                )
                findings.append(_error(Code.CANNOT_LEAVE, text, action.location))
    return findings


def _node_flow_findings(node: NodeDef, definition: GraphDef, unbound: Explored) -> list[Finding]:
    """States that can finish in the machine but not with what the node's actions declare.

    ``unbound`` is the node's machine explored without bindings.
    """
    declared = {hook: action.triggers for hook, action in node.bind.items()}
    explored = Explorer(definition.machines, declared).explore(node.machine)
    machine = definition.machines[node.machine]
    return [
        _error(
            Code.NO_FINAL,
            f"node {node.id!r}: with only the triggers its actions declare, state "
            f"{state!r} of machine {machine.name!r} has no path to a final state",
            node.location,
        )
        for state in machine.states
        if state in explored.reachable
        and state not in explored.finishing
        and (state in unbound.finishing or state not in unbound.reachable)
    ]


# --------------------------------------------------------------------------- bounds


def step_bound(
    name: str, machines: Mapping[str, MachineDef], settings: Mapping[str, Any] = EMPTY
) -> int:
    """The most action steps a node on machine ``name`` can take, derived from its budgets.

    Every entry into a ``spend_on`` state spends a unit and the engine never overspends,
    so with ``B`` units in all (limits after the node's ``with.budgets`` overrides) there
    are at most ``B`` such entries. When every loop passes through a ``spend_on`` state
    (no ``unbounded-cycle`` finding), the stretch between two entries visits each of the
    ``N`` non-final states at most once, so the machine takes at most ``T = (B + 1) * N``
    transitions. Each entry into a nesting state runs its child, itself bounded the same
    way (with fresh budgets), hence ``T + (T + 1) * max(child bounds)``.

    Args:
        name: The machine.
        machines: Every machine by name (nested ones included).
        settings: The node's ``with`` settings (``budgets`` overrides limits).
    """
    return _bound(name, machines, settings, ())


def _bound(
    name: str,
    machines: Mapping[str, MachineDef],
    settings: Mapping[str, Any],
    stack: tuple[str, ...],
) -> int:
    machine = machines.get(name)
    if machine is None or name in stack:
        return 0
    overrides = settings.get("budgets") or {}
    units = sum(int(overrides.get(b.name, b.limit)) for b in machine.budgets.values())
    live = sum(1 for state in machine.states.values() if state.final is None)
    transitions = (units + 1) * live
    children = [s.machine for s in machine.states.values() if s.machine]
    deepest = max((_bound(c, machines, settings, (*stack, name)) for c in children), default=0)
    return transitions + (transitions + 1) * deepest
