"""Exhaustive exploration: it uses the engine's own routing (choose agrees with the
library's trigger on every explored move), traces are shortest, and it stays quick."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builders import TESTS
from phasegraph.analysis import check
from phasegraph.analysis._explore import Explorer
from phasegraph.core._machine import CompiledMachine, _Guard
from phasegraph.errors import IllegalTriggerError
from phasegraph.spec._loader import (
    builtin_graphs,
    builtin_machines,
    load_machine_family,
    machine_source,
)


@pytest.mark.parametrize("name", builtin_machines())
def test_choose_agrees_with_the_library_on_every_explored_move(name: str) -> None:
    root, family = load_machine_family(name)
    explorer = Explorer(family)
    compiled = CompiledMachine(root)
    moves = 0
    for space in explorer.explore_all(name):
        limits = compiled.limits(space.assumption.settings)
        for config in space.parent:
            counters = dict(zip(root.budgets, config.spent, strict=True))
            for trigger in compiled.legal_triggers(config.state):
                chosen = compiled.choose(
                    config.state,
                    trigger,
                    counters=counters,
                    limits=limits,
                    settings=space.assumption.settings,
                )
                guard = _Guard("n", counters, limits, {}, space.assumption.settings, "")
                try:
                    expected: str | None = compiled.fire_via_library(config.state, trigger, guard)
                except IllegalTriggerError:
                    expected = None
                assert (chosen[1] if chosen else None) == expected
                if chosen is not None:
                    index, dest = chosen
                    listed = [
                        t
                        for t in root.transitions
                        if t.trigger == trigger and config.state in t.source
                    ]
                    assert listed[index].dest == dest  # candidates in declaration order
                moves += 1
    assert moves > 0


def test_a_guard_gap_comes_with_its_shortest_trace(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "machine: m\ninitial: a\nbudgets:\n  n: {limit: 3, spend_on: [a]}\n"
        "states:\n  a: {hook: a}\n  b: {hook: b}\n  done: {final: success}\n"
        "transitions:\n"
        "  - {trigger: next, source: a, dest: b}\n"
        "  - {trigger: back, source: b, dest: a}\n"
        "  - {trigger: ok, source: b, dest: done, conditions: ['payload:ready']}\n",
        encoding="utf-8",
    )
    found = {f.code: f for f in check(path).findings}
    gap = found["guard-gap"]
    assert "trigger 'ok' in state 'b'" in gap.message
    assert "payload ready=false" in gap.message
    assert "shortest trace: a --next--> b --ok--> refused" in gap.message
    assert gap.location is not None
    assert gap.location.line == 12


@pytest.mark.parametrize("name", builtin_machines() + builtin_graphs())
def test_shipped_definitions_explore_whole(name: str) -> None:
    assert all(f.code != "exploration-bounded" for f in check(name).findings)


def _graph_on_gap_setting(tmp_path: Path, settings: str) -> Path:
    source = TESTS / "fixtures" / "defects" / "gap_setting.yaml"
    (tmp_path / "gap_setting.yaml").write_text(source.read_text(encoding="utf-8"))
    (tmp_path / "acts.py").write_text("def go(ctx):\n    return 'go'\n", encoding="utf-8")
    path = tmp_path / "graph.yaml"
    path.write_text(
        "graph: g\nmachines: [./gap_setting.yaml]\nnodes:\n"
        f"  - id: pick\n    machine: gap_setting\n    with: {settings}\n"
        "    bind:\n      start: {python: 'acts:go', triggers: [go]}\n",
        encoding="utf-8",
    )
    return path


def test_a_graph_node_is_explored_with_its_own_settings(tmp_path: Path) -> None:
    """The machine alone has a gap (neither mode set); a node that sets a mode does not,
    and a node that sets none is reported at the node, with its trace."""
    assert check(_graph_on_gap_setting(tmp_path, "{mode: {fast: true}}")).findings == ()
    [gap] = check(_graph_on_gap_setting(tmp_path, "{}")).findings
    assert gap.code == "guard-gap"
    assert gap.message.startswith("node 'pick', with its settings and bindings: machine")
    assert "trigger 'go' in state 'start' is refused by every guard" in gap.message
    assert gap.location is not None
    assert gap.location.line == 4


def test_a_gap_in_a_nested_machine_is_traced_as_a_path(tmp_path: Path) -> None:
    """A graph node on a chain whose nested loop lost a fallback: the trace goes through
    the parent state into the child, every state named by its path."""
    loop = machine_source("quality_loop").read_text(encoding="utf-8")
    loop = loop.replace("machine: quality_loop", "machine: my_loop")
    loop = re.sub(r"^.*trigger: fail, source: verify, dest: gave_up.*\n", "", loop, flags=re.M)
    (tmp_path / "my_loop.yaml").write_text(loop, encoding="utf-8")
    chain = machine_source("guarded_quality_loop").read_text(encoding="utf-8")
    chain = chain.replace("machine: guarded_quality_loop", "machine: my_chain")
    chain = chain.replace("{machine: quality_loop,", "{machine: my_loop,")
    (tmp_path / "my_chain.yaml").write_text(chain, encoding="utf-8")
    (tmp_path / "acts.py").write_text("def x(ctx):\n    return 'ok'\n", encoding="utf-8")
    hooks = ("execute", "verify", "reflect", "recover", "emergency")
    binds = "".join(f"      {hook}: {{python: 'acts:x'}}\n" for hook in hooks)
    path = tmp_path / "g.yaml"
    path.write_text(
        "graph: g\nmachines: [./my_chain.yaml, ./my_loop.yaml]\nnodes:\n"
        f"  - id: build\n    machine: my_chain\n    bind:\n{binds}",
        encoding="utf-8",
    )
    [gap] = check(path).findings
    assert "trigger 'fail' in state 'main/verify' is refused by every guard" in gap.message
    assert "shortest trace: main > main/execute --done--> main/verify --fail--> " in gap.message
