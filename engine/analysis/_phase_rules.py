"""Tool rules that take away the only way to finish: ``advance`` where nothing else succeeds.

A ``tools:`` action fires ``advance`` when the model calls the ``advance`` tool, and a
model can call it only where it is offered: the node's ``llm:`` action lists it in its
``tools:`` and the phase rules (``with.phases``) list it by name for the phase of the call
(``"*"`` does not include it; a node without phase rules allows it everywhere). Where it
is not offered and ``advance`` is the only way the state's machine can end in
``success``, the agent can only give up or fail there: an error, found by exploring the
machine with and without that trigger.
"""

from __future__ import annotations

from collections.abc import Mapping

from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.analysis._flow import Explorer
from phasegraph.model import PATH_SEPARATOR, ActionDef, GraphDef, MachineDef, NodeDef
from phasegraph.tools._registry import ADVANCE_TOOL, BUILTIN_TOOLS, ToolPolicy, parse_policy

__all__ = ["advance_findings"]

_SUCCESS = "success"


def _advance_trigger(action: ActionDef) -> str | None:
    """The trigger a ``tools:`` action fires for an ``advance`` call (None: it never does)."""
    renamed = action.config.get("on_outcome") or {}
    trigger = renamed.get("advance", "advance")
    return None if trigger is None else str(trigger)


def _offered(node: NodeDef) -> bool:
    """Whether the node's model is offered ``advance`` (True when no llm action says)."""
    offers = [
        ADVANCE_TOOL in (action.config.get("llm") or {}).get("tools", ())
        for action in node.bind.values()
        if action.kind == "llm"
    ]
    return any(offers) or not offers


def _machine_at(machines: Mapping[str, MachineDef], root: str, path: list[str]) -> MachineDef:
    """The machine holding the state at ``path`` (state names from ``root`` down)."""
    machine = machines[root]
    for name in path[:-1]:
        machine = machines[machine.states[name].machine or ""]
    return machine


def _refusal(policy: ToolPolicy | None, path: list[str]) -> tuple[str, str] | None:
    """The phase whose rules refuse ``advance`` to a call made at ``path``, and how."""
    if policy is None or not policy.phases:
        return None
    phase, rule = policy.phase(path)
    if rule is None or rule.allows(ADVANCE_TOOL):
        return None
    if phase not in policy.phases:
        return phase, f'with.phases has no rule for {phase!r} (nor a "*" one listing it)'
    listed = 'is "*", which leaves out' if rule.tools is None else "does not list"
    return phase, f"with.phases.{phase}.tools {listed} `advance`"


def advance_findings(node: NodeDef, definition: GraphDef) -> list[Finding]:
    """States where the node's tool rules forbid ``advance`` and nothing else succeeds."""
    tools = {hook: a for hook, a in node.bind.items() if a.kind == "tools" and a.triggers}
    if not tools:
        return []
    known = sorted([*BUILTIN_TOOLS, ADVANCE_TOOL])
    policy, problems = parse_policy(node, definition, known)
    if problems:
        return []  # malformed rules: reported as what `run` refuses
    declared = {hook: action.triggers for hook, action in node.bind.items()}
    sites = Explorer(definition.machines, declared).hook_sites(node.machine)
    offered = _offered(node)
    findings: dict[tuple[str, str], Finding] = {}
    for hook, action in tools.items():
        trigger = _advance_trigger(action)
        if trigger is None or trigger not in action.triggers:
            continue
        with_it = Explorer(definition.machines, declared)
        without = Explorer(
            definition.machines,
            {**declared, hook: tuple(t for t in action.triggers if t != trigger)},
        )
        for site in sites.get(hook, ()):
            path = site.path.split(PATH_SEPARATOR)
            refusal = _refusal(policy, path)
            if refusal is None and offered:
                continue
            machine = _machine_at(definition.machines, node.machine, path)
            if (
                _SUCCESS not in with_it.explore(machine.name).outcomes
                or _SUCCESS in without.explore(machine.name).outcomes
            ):
                continue
            phase, why = refusal or ("", "its llm action does not offer the `advance` tool")
            fix = f"with.phases.{phase}.tools" if refusal else "the llm action's tools"
            text = (
                f"node {node.id!r}: at state {site.path!r} {why}, and `advance` is the only "
                f"way machine {machine.name!r} ends in success: the agent can never finish "
                f"there; add `advance` to {fix}"
            )
            findings.setdefault(
                (machine.name, phase),
                Finding(
                    severity=Severity.ERROR,
                    code=Code.SUCCESS_FORBIDDEN,
                    message=text,
                    location=action.location,
                ),
            )
    return list(findings.values())
