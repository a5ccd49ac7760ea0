"""Where a graph's runs take messages, proved state by state (``busy:``, see the run inbox).

A graph that declares ``busy:`` takes messages: each fires the message trigger on a
``human:`` gate that accepts it, or (``interrupt``, ``rollback``) on a busy node whose
state accepts it. For every node with such a gate, its machine is explored
(:class:`~phasegraph.analysis._explore.Explorer`) and a message is let arrive in every
reachable configuration: it is taken there, or must wait for a later configuration
that takes it. Found:

* ``messages-never-taken`` (error): no gate of the graph accepts the message trigger,
  so every message would wait for ever;
* ``message-waits-for-ever`` (warning): a message arriving while a node is in some
  state can never be taken (no state reachable from there takes one), with the
  shortest trace there;
* ``gate-busy-ignored`` (error): a gate declares ``busy:`` in a graph that takes no
  messages.
"""

from __future__ import annotations

from phasegraph.analysis._explore import Config, Explorer, Space
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.model import BusyPolicy, GraphDef, NodeDef

__all__ = ["message_findings"]

_CUTTING = frozenset({BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK})


def message_findings(definition: GraphDef, explorer: Explorer) -> list[Finding]:
    """What ``check`` says about the messages of ``definition``'s runs (see the module)."""
    busy = definition.busy
    if busy is None:
        return [
            Finding(
                severity=Severity.ERROR,
                code=Code.GATE_BUSY_IGNORED,
                message=f"node {node.id!r}, hook {hook!r}: the gate declares busy: "
                f"{action.config['busy']}, but graph {definition.name!r} takes no messages; "
                "declare `busy:` on the graph",
                location=action.location,
            )
            for node in definition.nodes
            for hook, action in node.bind.items()
            if action.kind == "human" and action.config.get("busy") is not None
        ]
    findings: list[Finding] = []
    taking = False
    for node in definition.nodes:
        gates = _message_gates(node, definition, busy.trigger)
        if not gates:
            continue
        taking = True
        cutting = busy.policy in _CUTTING or any(
            action.config.get("busy") in _CUTTING
            for action in node.bind.values()
            if action.kind == "human"
        )
        space = explorer.explore_all(node.machine)[0]
        takes = _taking_states(definition, node, gates, busy.trigger, cutting)
        findings += _waits(node, space, takes)
    if not taking:
        findings.append(
            Finding(
                severity=Severity.ERROR,
                code=Code.MESSAGES_NEVER_TAKEN,
                message=f"graph {definition.name!r} takes messages (busy: {busy.policy}) but "
                f"no gate accepts {busy.trigger!r}: every message would wait for ever; bind "
                f"a `human:` gate on a state with a {busy.trigger!r} transition",
                location=definition.location,
            )
        )
    return findings


def _message_gates(node: NodeDef, definition: GraphDef, trigger: str) -> set[str]:
    """The states of the node's machine whose ``human:`` gate accepts ``trigger``."""
    machine = definition.machines.get(node.machine)
    if machine is None:
        return set()
    leaving = {source for t in machine.transitions if t.trigger == trigger for source in t.source}
    found = set()
    for name, state in machine.states.items():
        action = node.bind.get(state.hook or "")
        if action is None or action.kind != "human" or name not in leaving:
            continue
        if not action.triggers or trigger in action.triggers:
            found.add(name)
    return found


def _taking_states(
    definition: GraphDef, node: NodeDef, gates: set[str], trigger: str, cutting: bool
) -> set[str]:
    """States where a message is taken: its gates, and (cutting) every state accepting it."""
    if not cutting:
        return gates
    machine = definition.machines[node.machine]
    accepting = {source for t in machine.transitions if t.trigger == trigger for source in t.source}
    return gates | accepting


def _waits(node: NodeDef, space: Space, takes: set[str]) -> list[Finding]:
    """A warning per state where an arriving message could never be taken."""
    machine = space.machine
    configs = [c for c in space.parent if machine.states[c.state].final is None]
    reaching = space.reaching(c for c in configs if c.state in takes)
    stuck: dict[str, Config] = {}
    for config in configs:
        if config not in reaching and config.state not in stuck:
            stuck[config.state] = config
    return [
        Finding(
            severity=Severity.WARNING,
            code=Code.MESSAGE_WAITS,
            message=f"node {node.id!r}: a message that arrives while it is in state "
            f"{state!r} waits for ever: no state reachable from there takes one (taken in "
            f"{', '.join(sorted(takes))}); shortest trace: {space.trace_text(config)}",
            location=node.location,
        )
        for state, config in sorted(stuck.items())
    ]
