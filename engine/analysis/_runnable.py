"""What ``run`` refuses or trips over that the loader accepts: ``check`` reports it too.

``check`` prepares the graph exactly as ``run`` does (:func:`phasegraph.run.prepare`:
every action built, ``python:`` targets imported, middleware and tool rules parsed) and
reports each problem it raises. It also finds what ``run`` would only meet later:

* a ``human:`` gate with ``timeout:`` in a state with no ``timeout`` transition (the node
  would fail at the deadline);
* ``capture:`` keys of ``shell:`` actions, which write data like declared ``writes``: two
  nodes that may run together capturing into one key fail the run when the second writes;
* a machine file beside the definition named like a built-in machine, which the built-in
  silently wins over;
* a ``once`` effect its machine runs again, as a retry or as a new attempt
  (:mod:`phasegraph.analysis._effects`);
* a read of a key the reader's dependencies write only on their way to failing
  (:mod:`phasegraph.analysis._failure_writes`).
"""

from __future__ import annotations

from pathlib import Path

from phasegraph.actions._human import TIMEOUT_TRIGGER
from phasegraph.analysis._effects import once_again_findings
from phasegraph.analysis._failure_writes import failure_write_findings
from phasegraph.analysis._findings import Code, Finding, Severity
from phasegraph.analysis._kinds import is_machine_file
from phasegraph.core._graph import compile_graph, find_cycle
from phasegraph.core._writes import declared_conflicts
from phasegraph.errors import Problem, SourceLocation, SpecError
from phasegraph.model import GraphDef, MachineDef, NodeDef, nested_machines, replace
from phasegraph.run import prepare
from phasegraph.spec._loader import builtin_machines, machine_source
from phasegraph.tools._registry import build_tools

__all__ = ["graph_run_findings", "machine_file_findings"]


def _error(code: Code, message: str, where: SourceLocation | None) -> Finding:
    return Finding(severity=Severity.ERROR, code=code, message=message, location=where)


def graph_run_findings(definition: GraphDef, source: str) -> list[Finding]:
    """Everything ``run`` would refuse or fail on in a graph that loads."""
    problems: list[Problem] = []
    findings: list[Finding] = []
    try:
        prepared = prepare(definition, source)
    except SpecError as exc:
        problems += exc.problems
    else:  # the effect kinds are known once the actions are built
        findings += once_again_findings(definition, prepared.effects)
    try:  # prepare stops before the tool rules when anything else is wrong
        build_tools(definition)
    except SpecError as exc:
        problems += exc.problems
    findings += [
        _error(
            Code.NOT_RUNNABLE,
            f"{problem.message} (`phasegraph run` refuses this graph)",
            problem.location,
        )
        for problem in dict.fromkeys(problems)
    ]
    findings += _gate_timeouts(definition)
    findings += _capture_conflicts(definition)
    findings += failure_write_findings(definition)
    if definition.location is not None:
        findings += _shadowed_files(definition, Path(definition.location.path).parent)
    return findings


def _gate_timeouts(definition: GraphDef) -> list[Finding]:
    findings = []
    for node in definition.nodes:
        family = nested_machines(node.machine, definition.machines)
        for hook, action in node.bind.items():
            if action.kind != "human" or action.config.get("timeout") is None:
                continue
            for machine in family:
                for state in machine.states.values():
                    if state.hook != hook:
                        continue
                    accepted = {t.trigger for t in machine.transitions if state.name in t.source}
                    if TIMEOUT_TRIGGER in accepted:
                        continue
                    text = (
                        f"node {node.id!r}: the human gate bound to hook {hook!r} has "
                        f"`timeout: {action.config['timeout']}`, but state {state.name!r} of "
                        f"machine {machine.name!r} has no `timeout` transition, so the node "
                        f"fails when the deadline passes: add `{{trigger: timeout, source: "
                        f"{state.name}, dest: ...}}` or remove the timeout"
                    )
                    findings.append(_error(Code.GATE_TIMEOUT, text, action.location))
    return findings


def _captures(node: NodeDef) -> tuple[str, ...]:
    return tuple(
        str(action.config["capture"])
        for action in node.bind.values()
        if action.kind == "shell" and action.config.get("capture")
    )


def _capture_conflicts(definition: GraphDef) -> list[Finding]:
    """Write conflicts that appear once ``capture:`` keys count as writes."""
    if find_cycle(definition.nodes) is not None:
        return []
    captured = {node.id: _captures(node) for node in definition.nodes}
    if not any(captured.values()):
        return []
    widened = tuple(
        replace(node, writes=tuple(dict.fromkeys((*(node.writes or ()), *keys)))) if keys else node
        for node, keys in ((n, captured[n.id]) for n in definition.nodes)
    )
    workflow = compile_graph(replace(definition, nodes=widened))
    before = {
        (c.first, c.second, c.keys)
        for c in declared_conflicts(definition.nodes, definition.reducers, workflow)
    }
    located = {node.id: node.location for node in definition.nodes}
    return [
        _error(
            Code.WRITE_CONFLICT,
            conflict.message() + " (a shell action's `capture:` key is a write)",
            located[conflict.second],
        )
        for conflict in declared_conflicts(widened, definition.reducers, workflow)
        if (conflict.first, conflict.second, conflict.keys) not in before
    ]


def _shadowed_files(definition: GraphDef, folder: Path) -> list[Finding]:
    """Built-in machines a graph uses while a file of that name lies beside it, unlisted."""
    listed = {
        Path(m.location.path).resolve()
        for m in definition.machines.values()
        if m.location is not None
    }
    findings = []
    for name in sorted({node.machine for node in definition.nodes}):
        machine = definition.machines.get(name)
        if machine is None or name not in builtin_machines():
            continue
        beside = folder / f"{name}.yaml"
        if _shadows(name, beside) and beside.resolve() not in listed:
            findings.append(_shadow_warning(name, beside, definition.location))
    return findings


def machine_file_findings(
    root: MachineDef, family: dict[str, MachineDef], path: Path
) -> list[Finding]:
    """Nested built-in machines that a file beside the machine file names too."""
    folder = path.parent
    findings = []
    for machine in family.values():
        for state in machine.states.values():
            name = state.machine
            if name is None or name not in builtin_machines() or name == root.name:
                continue
            beside = folder / f"{name}.yaml"
            if _shadows(name, beside) and beside.resolve() != path.resolve():
                findings.append(_shadow_warning(name, beside, state.location))
    return list(dict.fromkeys(findings))


def _shadows(name: str, beside: Path) -> bool:
    """Whether ``beside`` is a machine file the built-in machine ``name`` wins over.

    The built-in's own file is not: checking the shipped ``states/`` folder is not a
    mistake to warn about.
    """
    return is_machine_file(beside) and beside.resolve() != machine_source(name).resolve()


def _shadow_warning(name: str, beside: Path, where: SourceLocation | None) -> Finding:
    text = (
        f"machine {name!r} is the built-in machine, not the file {beside} beside this "
        f"definition: built-in machines win over files of the same name. Rename the file "
        f"and its `machine:` (e.g. my_{name}), or list it under a graph's `machines:`"
    )
    return Finding(severity=Severity.WARNING, code=Code.SHADOWED_FILE, message=text, location=where)
