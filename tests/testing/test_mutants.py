"""Mutation testing: mutants of every shipped machine and graph (a transition dropped
or redirected, a guard or an outcome flipped, a spend moved, an error handler deleted, a
final state made non-final), and how many `phasegraph check --strict` kills.

The bulk runs in process (the same analysis `check` runs); one test runs the real
command on mutant files and a property checks the two agree."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.analysis import check
from phasegraph.model import MachineDef
from phasegraph.spec import load_graph
from phasegraph.spec._loader import builtin_graphs, builtin_machines, load_machine_family
from phasegraph.testing._mutants import (
    OPERATORS,
    Mutant,
    check_kills,
    equivalent,
    graph_mutants,
    machine_mutants,
    machine_text,
)

# The fewest mutants `check --strict` must kill, per operator, of the shipped machines
# (each on its own) and of the shipped graphs (the machines in place, with each node's
# settings and bindings). The mutants that survive are mostly machines that still make
# sense, only not the intended one (a retry that goes to another valid state): no
# analysis can tell them from a design, which is what a graph's own runs
# (`phasegraph test`) are for.
KILLED = {
    "machines": {
        "drop-transition": 43,
        "delete-error-handler": 33,
        "redirect-transition": 394,
        "flip-guard": 28,
        "flip-outcome": 0,
        "make-non-final": 36,
        "move-spend": 39,
    },
    "graphs": {
        "drop-transition": 42,
        "delete-error-handler": 38,
        "redirect-transition": 303,
        "flip-guard": 13,
        "flip-outcome": 10,
        "make-non-final": 37,
        "move-spend": 13,
    },
}

# Every surviving mutant that behaves exactly as its original, and why.
_SAME_END = "failed and rejected are both final with outcome failed: the node ends the same way"
EQUIVALENT = {
    "spec_review: redirect transition 1 `fail` planning -> failed to rejected": _SAME_END,
    "spec_review: redirect transition 4 `invalid` spec_generated -> failed to rejected": _SAME_END,
    "coding_task: spec_review: redirect transition 1 `fail` planning -> failed to rejected": (
        _SAME_END
    ),
    "coding_task: spec_review: redirect transition 4 `invalid` spec_generated -> failed to "
    "rejected": _SAME_END,
}


def _families() -> dict[str, tuple[MachineDef, dict[str, MachineDef]]]:
    return {name: load_machine_family(name) for name in builtin_machines()}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, list[tuple[Mutant, bool]]]:
    """Every mutant of the shipped machines and graphs, and whether check kills it."""
    machines = [
        (mutant, check_kills(mutant, family))
        for root, family in _families().values()
        for mutant in machine_mutants(root)
    ]
    graphs = [
        (mutant, check_kills(mutant, {}))
        for name in builtin_graphs()
        for mutant in graph_mutants(load_graph(name))
    ]
    return {"machines": machines, "graphs": graphs}


def _table(found: list[tuple[Mutant, bool]]) -> Counter[tuple[str, str]]:
    table: Counter[tuple[str, str]] = Counter()
    for mutant, killed in found:
        verdict = "killed" if killed else ("equivalent" if equivalent(mutant) else "survived")
        table[(mutant.operator, verdict)] += 1
    return table


@pytest.mark.parametrize("kind", ["machines", "graphs"])
def test_check_kills_at_least_the_recorded_mutants(
    verdicts: dict[str, list[tuple[Mutant, bool]]], kind: str
) -> None:
    table = _table(verdicts[kind])
    shown = {op: {v: n for (o, v), n in table.items() if o == op} for op in OPERATORS}
    for operator, floor in KILLED[kind].items():
        assert table[(operator, "killed")] >= floor, shown
    assert sum(n for (_, v), n in table.items() if v == "killed") >= sum(KILLED[kind].values())


def test_every_operator_makes_mutants_of_the_shipped_machines(
    verdicts: dict[str, list[tuple[Mutant, bool]]],
) -> None:
    made = {mutant.operator for mutant, _ in verdicts["machines"]}
    assert made == set(OPERATORS)
    keys = [mutant.key for mutant, _ in verdicts["machines"] + verdicts["graphs"]]
    assert len(keys) == len(set(keys))  # each mutant is named apart


def test_final_states_made_non_final_are_always_killed(
    verdicts: dict[str, list[tuple[Mutant, bool]]],
) -> None:
    """A state with no way out that ends nothing: every node reaching it never finishes."""
    found = [m for m, _ in verdicts["machines"] + verdicts["graphs"]]
    spared = [m.key for m, k in verdicts["machines"] + verdicts["graphs"] if not k]
    assert all(m.key not in spared for m in found if m.operator == "make-non-final")


def test_the_equivalent_survivors_are_listed_with_their_reason(
    verdicts: dict[str, list[tuple[Mutant, bool]]],
) -> None:
    found = {
        mutant.key: reason
        for mutant, killed in verdicts["machines"] + verdicts["graphs"]
        if not killed and (reason := equivalent(mutant)) is not None
    }
    assert found == EQUIVALENT


_SAMPLED = [m for root, family in _families().values() for m in machine_mutants(root)]


@settings(max_examples=30)
@given(index=st.integers(min_value=0, max_value=len(_SAMPLED) - 1))
def test_the_in_process_verdict_is_the_verdict_of_check_on_the_file(
    tmp_path_factory: pytest.TempPathFactory, index: int
) -> None:
    mutant = _SAMPLED[index]
    family = _families()[mutant.original.name][1]
    path = tmp_path_factory.mktemp("mutant") / "mutant.yaml"
    path.write_text(machine_text(mutant.machine), encoding="utf-8")
    fails = any(f.severity in {"error", "warning"} for f in check(path).findings)
    assert fails == check_kills(mutant, family), mutant.key


def test_check_strict_on_the_command_line_kills_what_the_suite_counts(tmp_path: Path) -> None:
    """The real command, in a subprocess, on one killed and one surviving mutant."""
    import json
    import subprocess
    import sys

    root, family = load_machine_family("loop")
    mutants = {m.key: m for m in machine_mutants(root)}
    killed = mutants["loop: state done is not final"]
    survivor = mutants["loop: final state exhausted ends success instead of failed"]
    assert check_kills(killed, family)
    assert not check_kills(survivor, family)
    paths = []
    for name, mutant in (("killed", killed), ("survivor", survivor)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(machine_text(mutant.machine), encoding="utf-8")
        paths.append(str(path))
    main = "import sys; from phasegraph.cli import main; sys.exit(main())"
    for path, status in zip(paths, (1, 0), strict=True):
        done = subprocess.run(
            [sys.executable, "-c", main, "check", "--strict", "--json", path],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == status, done.stdout + done.stderr
        assert bool(json.loads(done.stdout)) == bool(status)
