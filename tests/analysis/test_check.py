"""Tests for `phasegraph check`: every rule on a broken and a fixed definition, the shipped
definitions, the rules on definitions built in code, and the command's output and exit."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from builders import TESTS, graph, loop_machine, task_machine
from phasegraph import cli
from phasegraph.analysis import Code, Finding, Severity, check
from phasegraph.analysis._check import machine_family, resolve
from phasegraph.analysis._rules import analyze_graph, analyze_machine, step_bound
from phasegraph.errors import InputError, SourceLocation
from phasegraph.model import (
    ActionDef,
    MachineDef,
    NodeDef,
    NodeOutcome,
    StateDef,
    TransitionDef,
    replace,
)
from phasegraph.spec._catalog import builtin_graphs, builtin_machines

CHECK = TESTS / "fixtures" / "check"
BROKEN, FIXED = CHECK / "broken", CHECK / "fixed"

# (fixture, code it must trigger, severity, line of the finding in the broken file)
CASES = [
    ("unreachable.yaml", Code.UNREACHABLE, Severity.WARNING, 6),
    ("trap.yaml", Code.NO_FINAL, Severity.ERROR, 6),
    ("retry_unbounded.yaml", Code.UNBOUNDED, Severity.ERROR, 5),
    ("spin.yaml", Code.UNBOUNDED, Severity.ERROR, 6),
    ("nested_outcome.yaml", Code.OUTCOME_NOT_ACCEPTED, Severity.ERROR, 5),
    ("unknown_budget.yaml", Code.UNKNOWN_BUDGET, Severity.ERROR, 11),
    ("stays.yaml", Code.CANNOT_LEAVE, Severity.ERROR, 8),
    ("refused_trigger.yaml", Code.TRIGGER_NOT_ACCEPTED, Severity.ERROR, 7),
    ("unbound.yaml", Code.UNBOUND_HOOK, Severity.ERROR, 4),
    ("dag_cycle.yaml", Code.DAG_CYCLE, Severity.ERROR, 4),
]


@pytest.mark.parametrize(("name", "code", "severity", "line"), CASES)
def test_broken_definition_triggers_its_check(
    name: str, code: Code, severity: Severity, line: int
) -> None:
    report = check(BROKEN / name)
    hits = [f for f in report.findings if f.code is code]
    assert hits, f"{name}: no {code} in {[str(f) for f in report.findings]}"
    finding = hits[0]
    assert finding.severity is severity
    assert finding.location is not None
    assert finding.location.path == str(BROKEN / name)
    assert finding.location.line == line
    assert str(finding).startswith(f"{BROKEN / name}:{line}:")
    assert f": {severity}: " in str(finding)


@pytest.mark.parametrize("name", sorted({case[0] for case in CASES}))
def test_fixed_definition_is_clean(name: str) -> None:
    report = check(FIXED / name)
    assert report.findings == (), [str(f) for f in report.findings]
    assert report.kind in {"machine", "graph"}


def test_every_broken_fixture_has_a_fixed_twin() -> None:
    assert {p.name for p in BROKEN.glob("*.yaml")} == {p.name for p in FIXED.glob("*.yaml")}


@pytest.mark.parametrize("name", builtin_machines() + builtin_graphs())
def test_shipped_definition_passes_check(name: str) -> None:
    report = check(name)
    assert report.errors == 0, "\n".join(map(str, report.findings))
    assert report.kind == ("machine" if name in builtin_machines() else "graph")


def test_unbounded_cycle_message_names_the_loop_and_the_fix() -> None:
    [finding] = check(BROKEN / "retry_unbounded.yaml").findings
    assert "execute -> verify -> execute" in finding.message
    assert "spend_on" in finding.message


def test_a_loop_through_a_spend_on_state_is_bounded() -> None:
    """The engine guards entry into spend_on states, so such a loop needs no other guard."""
    machine = loop_machine()
    unguarded = replace(
        machine,
        transitions=(
            TransitionDef(trigger="again", source=("work",), dest="work"),
            TransitionDef(trigger="stop", source=("work",), dest="done"),
        ),
        states=MappingProxyType({k: v for k, v in machine.states.items() if k != "exhausted"}),
    )
    # Bounded, but once `steps` is spent every guard refuses `again`: the node fails.
    [gap] = analyze_machine("loop", {"loop": unguarded})
    assert gap.code is Code.GUARD_GAP
    assert "budget steps spent" in gap.message
    assert "(--again--> work) x" in gap.message
    free = replace(unguarded, budgets=MappingProxyType({}))
    [finding] = analyze_machine("loop", {"loop": free})
    assert finding.code is Code.UNBOUNDED
    assert finding.severity is Severity.ERROR


# --------------------------------------------------------------------------- rules on code


def _bound(node: NodeDef, **bind: ActionDef) -> NodeDef:
    return replace(node, bind=MappingProxyType(bind))


def test_rules_apply_to_definitions_built_in_code() -> None:
    """The loader rejects these in files; the rules find them in hand-built definitions."""
    python = ActionDef(kind="python", config={}, triggers=("ok", "maybe"))
    nodes = [
        _bound(NodeDef(id="a", machine="task", needs=("b",)), run=python),
        NodeDef(id="b", machine="task", needs=("a",)),
        _bound(NodeDef(id="c", machine="task"), run=python, walk=python),
        NodeDef(id="d", machine="nowhere"),
    ]
    found = {f.code for f in analyze_graph(graph(nodes))}
    assert {
        Code.DAG_CYCLE,
        Code.UNBOUND_HOOK,
        Code.TRIGGER_NOT_ACCEPTED,
        Code.UNKNOWN_HOOK,
        Code.UNKNOWN_MACHINE,
    } <= found


def test_unknown_budget_and_missing_final_in_code() -> None:
    machine = MachineDef(
        name="m",
        initial="a",
        states=MappingProxyType({"a": StateDef(name="a", hook="a")}),
        transitions=(
            TransitionDef(trigger="go", source=("a",), dest="a", conditions=("budget:nope",)),
        ),
    )
    codes = [f.code for f in analyze_machine("m", {"m": machine})]
    assert Code.UNKNOWN_BUDGET in codes
    assert Code.NO_FINAL in codes


def test_node_bindings_that_starve_a_state_of_exits_are_errors() -> None:
    """With only `fail` declared, the task machine still finishes; with only a self-loop
    trigger, the state cannot be left."""
    ok = _bound(NodeDef(id="n", machine="task"), run=ActionDef(kind="python", config={}))
    assert analyze_graph(graph([ok])) == []
    looping = replace(
        task_machine(),
        name="poll",
        transitions=(
            *task_machine().transitions,
            TransitionDef(trigger="wait", source=("run",), dest="run"),
        ),
    )
    waits = ActionDef(kind="python", config={}, triggers=("wait",))
    node = _bound(NodeDef(id="n", machine="poll"), run=waits)
    codes = {f.code for f in analyze_graph(graph([node], machines=[looping]))}
    assert Code.CANNOT_LEAVE in codes
    assert Code.NO_FINAL in codes


# --------------------------------------------------------------------------- bounds


def test_step_bound_counts_budget_units_and_live_states() -> None:
    machines = {"loop": loop_machine(limit=3)}
    assert step_bound("loop", machines) == (3 + 1) * 1
    assert step_bound("loop", machines, {"budgets": {"steps": 10}}) == 11
    assert step_bound("task", {"task": task_machine()}) == 1


def test_step_bound_multiplies_through_nested_machines() -> None:
    parent = MachineDef(
        name="parent",
        initial="inner",
        states=MappingProxyType(
            {
                "inner": StateDef(name="inner", machine="loop"),
                "done": StateDef(name="done", final=NodeOutcome.SUCCESS),
            }
        ),
        transitions=(
            TransitionDef(trigger="success", source=("inner",), dest="done"),
            TransitionDef(trigger="failed", source=("inner",), dest="done"),
        ),
    )
    machines = {"parent": parent, "loop": loop_machine(limit=2)}
    outer = (0 + 1) * 1
    assert step_bound("parent", machines) == outer + (outer + 1) * 3


def test_machine_family_loads_nested_machines() -> None:
    root, family = machine_family(FIXED / "nested_outcome.yaml")
    assert root.name == "nested_outcome"
    assert set(family) == {"nested_outcome", "task"}


# --------------------------------------------------------------------------- targets


def test_resolve_reads_kind_from_top_level_keys(tmp_path: Path) -> None:
    assert resolve(FIXED / "trap.yaml").kind == "machine"
    assert resolve(FIXED / "unbound.yaml").kind == "graph"
    assert resolve("loop").kind == "machine"
    assert resolve("hello").kind == "graph"
    other = tmp_path / "other.yaml"
    other.write_text("name: something\n", encoding="utf-8")
    assert resolve(other).kind is None
    [finding] = check(other).findings
    assert finding.code is Code.INVALID
    assert finding.severity is Severity.ERROR


def test_unreadable_targets_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        resolve(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="no built-in machine or graph is called 'lopo'"):
        resolve("lopo")


def test_yaml_syntax_error_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("machine: bad\nstates: {a: [}\n", encoding="utf-8")
    [finding] = check(path).findings
    assert finding.code is Code.YAML
    assert finding.location is not None
    assert finding.location.line == 2


def test_finding_json_shape() -> None:
    finding = Finding(
        severity=Severity.WARNING,
        code=Code.UNREACHABLE,
        message="m",
        location=SourceLocation("f.yaml", 3, 5),
    )
    assert finding.to_json() == {
        "severity": "warning",
        "code": "unreachable-state",
        "message": "m",
        "file": "f.yaml",
        "line": 3,
        "column": 5,
    }


# --------------------------------------------------------------------------- command


def test_cli_check_errors_exit_1_with_located_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(BROKEN / "trap.yaml"), "loop"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{BROKEN / 'trap.yaml'}:6:3: error: state 'limbo'")
    assert lines[-1] == "checked 2 definitions: 1 error, 0 warnings"


def test_cli_check_warnings_only_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(BROKEN / "unreachable.yaml")]) == 0
    out = capsys.readouterr().out
    assert ": warning: state 'orphan'" in out
    assert out.splitlines()[-1] == "checked 1 definition: 0 errors, 1 warning"


def test_cli_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--json", str(BROKEN / "stays.yaml")]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert {f["code"] for f in findings} == {"hook-cannot-leave", "no-final-path"}
    first = findings[0]
    assert {"severity", "code", "message", "file", "line", "column"} <= set(first)
    assert first["file"] == str(BROKEN / "stays.yaml")
    assert first["severity"] == "error"


def test_cli_check_every_shipped_definition_passes(capsys: pytest.CaptureFixture[str]) -> None:
    names = builtin_machines() + builtin_graphs()
    assert cli.main(["check", *names]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"checked {len(names)} definitions")


def test_cli_check_unreadable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert cli.main(["check", "no_such_builtin"]) == 2
