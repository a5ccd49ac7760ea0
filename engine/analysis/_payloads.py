"""What a trigger's payload can carry, against what a node's machine reads from it.

A state's action sees the payload of the trigger that entered it (``ctx.payload``; an
``llm:`` template reads it as ``{payload[KEY]}``), and a ``payload:KEY`` guard reads the
payload of the trigger being fired. What a payload holds is fixed by the action that
fired the trigger (see :mod:`phasegraph.actions`):

=========================  ============================================================
fired by                   payload keys
=========================  ============================================================
``shell:``                 ``exit``, ``timed_out``; when the command failed (a non-zero
                           status or a timeout) also ``error_code``, ``action``,
                           ``message``, ``stderr``
``http:``                  ``status``; for an error status also ``error_code``,
                           ``action``, ``message``
``llm:``                   ``turn``, ``tool_calls``, ``structured``, ``refusal``;
                           ``compressed`` when it compressed; ``calls``, ``refused``,
                           ``at`` for the tool calls it runs
``tools:``                 ``calls``, ``refused``, ``at``
``error`` (any action      ``error_code``, ``error_type``, ``message``, ``retryable``,
that raised)               ``retry_after``, ``status``
a gate's ``timeout``       ``interrupt``
=========================  ============================================================

A ``python:`` function, a gate's answer, a child run and a nested machine's outcome may
carry anything, so nothing is judged there. The node's start carries no payload into the
outermost machine's initial state; a nested machine's initial state is entered with the
payload that entered the state nesting it. Two findings follow, each with the path that
leads there:

* ``payload-not-carried`` (error): an ``llm:`` template reads ``{payload[KEY]}`` in a
  state that is also entered without ``KEY`` (the node's start, or a trigger whose action
  does not put it in its payload): that step fails filling the template. The system
  message is filled on every turn, the prompt only when the model is due one, which a
  model's or a tool's step may not leave it: a prompt's ways in from those are not
  judged;
* ``payload-guard-unsatisfiable`` (warning): a ``payload:KEY`` condition that no action
  bound to the transition's source states puts in the trigger's payload: for this node
  the transition is never taken.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Final

from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.model import GraphDef, MachineDef, NodeDef, nested_machines, template_parts

__all__ = ["payload_findings"]

_FAILED: Final = frozenset({"error_code", "action", "message"})
_SHELL: Final = frozenset({"exit", "timed_out"})
_SHELL_FAILED: Final = _SHELL | _FAILED | {"stderr"}
_HTTP: Final = frozenset({"status"}) | _FAILED
_TOOLS: Final = frozenset({"calls", "refused", "at"})
_LLM: Final = frozenset({"turn", "tool_calls", "structured", "refusal", "compressed"}) | _TOOLS
_ERROR: Final = frozenset(
    {"error_code", "error_type", "message", "retryable", "retry_after", "status"}
)
_TIMEOUT: Final = frozenset({"interrupt"})
_SHELL_EXIT: Final = {"0": "ok", "default": "fail"}  # a shell action's on_exit by default


def payload_findings(definition: GraphDef) -> list[Finding]:
    """Per node: templates reading a payload key a way in lacks, guards nothing satisfies."""
    findings: list[Finding] = []
    for node in definition.nodes:
        if node.machine not in definition.machines:
            continue  # reported as an unknown machine
        family = nested_machines(node.machine, definition.machines)
        parents: dict[str, list[tuple[MachineDef, str]]] = {}
        for machine in family:
            for state in machine.states.values():
                if state.machine and state.machine != node.machine:
                    parents.setdefault(state.machine, []).append((machine, state.name))
        for machine in family:
            findings += _template_findings(node, machine, parents)
            findings += _guard_findings(node, machine)
    return findings


def carried(node: NodeDef, machine: MachineDef, source: str, trigger: str) -> frozenset[str] | None:
    """The keys the payload of ``trigger`` fired in state ``source`` can hold.

    ``None`` when it may hold anything (a ``python:`` function, a gate's answer, a child
    run, a nested machine's outcome, a state with no bound action).
    """
    state = machine.states.get(source)
    if state is None or state.machine is not None:
        return None
    if trigger == ERROR_TRIGGER:
        return _ERROR
    action = node.bind.get(state.hook or "")
    if action is None:
        return None
    if action.kind == "shell":
        return _SHELL_FAILED if trigger in _failing(action.config) else _SHELL
    if action.kind == "http":
        return _HTTP
    if action.kind == "llm":
        return _LLM
    if action.kind == "tools":
        return _TOOLS
    if action.kind == "human" and trigger == TIMEOUT_TRIGGER:
        return _TIMEOUT
    return None


def _failing(config: Mapping[str, Any]) -> set[str]:
    """The triggers a shell action fires for a non-zero status or a timeout."""
    on_exit = {str(k): str(v) for k, v in (config.get("on_exit") or _SHELL_EXIT).items()}
    failing = {trigger for status, trigger in on_exit.items() if status != "0"}
    failing.add(on_exit.get("default", "fail"))
    if config.get("timeout_trigger"):
        failing.add(str(config["timeout_trigger"]))
    return failing


def _payload_reads(template: Any) -> Iterator[str]:
    """The keys ``{payload[KEY]}`` placeholders read in ``template`` (strings, nested)."""
    if isinstance(template, str):
        try:
            parts = template_parts(template)
        except ValueError:
            return  # the loader reports a malformed template
        for _, path in parts:
            if path is not None and path[0] == "payload" and len(path) > 1:
                yield path[1]
    elif isinstance(template, Mapping):
        for value in template.values():
            yield from _payload_reads(value)
    elif isinstance(template, list | tuple):
        for value in template:
            yield from _payload_reads(value)


_Parents = Mapping[str, list[tuple[MachineDef, str]]]
"""A nested machine's name → each (machine, state) that nests it."""


def _template_findings(node: NodeDef, machine: MachineDef, parents: _Parents) -> list[Finding]:
    findings = []
    for hook, action in node.bind.items():
        if action.kind != "llm":
            continue  # only an llm template names the entering trigger's payload
        settings = action.config.get("llm") or {}
        # The system message is filled on every turn; the prompt only when the model is
        # due one (nothing said yet, or it answered), which a way in from a model's or a
        # tool's step may not leave it: only the ways in from other actions count there.
        reads = {
            key: part == "prompt"
            for part in ("prompt", "system")
            for key in _payload_reads(settings.get(part))
        }
        for state in (s for s in machine.states.values() if s.hook == hook):
            for key, prompt in reads.items():
                entry = _entered_without(node, machine, state.name, key, parents, prompt=prompt)
                if entry is None:
                    continue
                text = (
                    f"node {node.id!r}: the llm action bound to hook {hook!r} reads "
                    f"{{payload[{key}]}}, but state {state.name!r} of machine "
                    f"{machine.name!r} is also entered {entry}: that step fails filling "
                    f"the template. Read it only where every way in carries {key!r}, or "
                    f"bind a state of its own to the way in that does"
                )
                findings.append(_finding(Severity.ERROR, Code.PAYLOAD_NOT_CARRIED, text, action))
    return findings


def _entered_without(
    node: NodeDef,
    machine: MachineDef,
    state: str,
    key: str,
    parents: _Parents,
    *,
    prompt: bool,
    seen: frozenset[tuple[str, str]] = frozenset(),
) -> str | None:
    """How ``state`` is entered with a payload that cannot carry ``key``, in words.

    A nested machine's initial state is entered with the payload that entered the state
    nesting it; the outermost one's, when the node starts, with none. ``prompt``: the
    read is in a prompt, filled only when the model is due one: a way in from an
    ``llm:`` or ``tools:`` step is not judged.
    """
    reachable = _paths(machine)
    if state == machine.initial:
        way = _started_without(node, machine, key, parents, prompt=prompt, seen=seen)
        if way is not None:
            return way
    for transition in machine.transitions:
        if transition.dest != state:
            continue
        for source in transition.source:
            if source not in reachable:
                continue
            keys = carried(node, machine, source, transition.trigger)
            if prompt and _conversing(node, machine, source):
                continue
            if keys is not None and key not in keys:
                path = _shown([*reachable[source], (transition.trigger, state)], machine)
                said = ", ".join(sorted(keys))
                return f"on {path}, whose payload holds only {said}"
    return None


def _started_without(
    node: NodeDef,
    machine: MachineDef,
    key: str,
    parents: _Parents,
    *,
    prompt: bool,
    seen: frozenset[tuple[str, str]],
) -> str | None:
    """How ``machine``'s initial state is entered without ``key``: at the start, or nested."""
    outer = parents.get(machine.name, [])
    if not outer:
        return "when the node starts, with no payload"
    for parent, nesting in outer:
        if (parent.name, nesting) in seen:
            continue
        below = seen | {(parent.name, nesting)}
        way = _entered_without(node, parent, nesting, key, parents, prompt=prompt, seen=below)
        if way is not None:
            return f"{way} (entering {parent.name!r} state {nesting!r}, which nests it)"
    return None


def _conversing(node: NodeDef, machine: MachineDef, source: str) -> bool:
    """Whether ``source``'s action is a model's or a tool's step: after it no prompt may be due."""
    state = machine.states.get(source)
    action = node.bind.get(state.hook or "") if state is not None else None
    return action is not None and action.kind in ("llm", "tools")


def _guard_findings(node: NodeDef, machine: MachineDef) -> list[Finding]:
    findings = []
    reachable = _paths(machine)
    for transition in machine.transitions:
        guards = [p.partition(":")[2] for p in transition.conditions if p.startswith("payload:")]
        sources = [s for s in transition.source if s in reachable]
        if not guards or not sources:
            continue
        fired = [(s, carried(node, machine, s, transition.trigger)) for s in sources]
        if any(keys is None for _, keys in fired):
            continue
        for key in guards:
            if any(keys is not None and key in keys for _, keys in fired):
                continue
            source, keys = fired[0]
            path = _shown([*reachable[source], (transition.trigger, transition.dest)], machine)
            text = (
                f"node {node.id!r}: transition {transition.trigger!r} "
                f"{','.join(transition.source)} -> {transition.dest} of machine "
                f"{machine.name!r} requires payload:{key}, but no action bound to its "
                f"sources puts {key!r} in the payload of {transition.trigger!r} (on {path} "
                f"it holds only {', '.join(sorted(keys or ()))}): for this node it is never "
                "taken; bind an action that sets it (a python function's payload) or drop "
                "the guard"
            )
            where = transition.location or node.location
            findings.append(
                Finding(
                    severity=Severity.WARNING,
                    code=Code.PAYLOAD_GUARD_UNSATISFIABLE,
                    message=text,
                    location=where,
                )
            )
    return findings


def _paths(machine: MachineDef) -> dict[str, list[tuple[str, str]]]:
    """Each state reachable from the initial one, with a shortest path to it (trigger, state)."""
    if machine.initial not in machine.states:
        return {}
    found: dict[str, list[tuple[str, str]]] = {machine.initial: []}
    queue = deque([machine.initial])
    while queue:
        here = queue.popleft()
        for transition in machine.transitions:
            if here in transition.source and transition.dest not in found:
                found[transition.dest] = [*found[here], (transition.trigger, transition.dest)]
                queue.append(transition.dest)
    return found


def _shown(moves: list[tuple[str, str]], machine: MachineDef) -> str:
    return machine.initial + "".join(f" --{trigger}--> {state}" for trigger, state in moves)


def _finding(severity: Severity, code: Code, text: str, action: Any) -> Finding:
    return Finding(severity=severity, code=code, message=text, location=action.location)
