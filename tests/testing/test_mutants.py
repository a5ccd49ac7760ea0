"""Mutation testing: mutants of every shipped machine and graph (a transition dropped
or redirected, a guard or an outcome flipped, a spend moved, an error handler deleted, a
final state made non-final; and a default limit off by one, a source dropped from a
multi-source transition, two same-trigger transitions swapped, a failure's outcome kind
changed, a transition retriggered), and how many `phasegraph check --strict` and
`phasegraph test` kill.

`check` kills the mutants that break a machine's structure; the rest still make sense,
only not the intended machine (a retry that goes to another valid state), and are killed
by the machines' own examples (`examples:` in each machine file, run by `phasegraph
test`): the examples of the original machine are run against the mutant. The bulk runs
in process (the same analysis `check` runs and the same example runner `test` runs);
tests below run the real commands on mutant files and check the verdicts agree.
`python -m phasegraph.testing._mutants` prints the table."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.analysis import check
from phasegraph.model import MachineDef
from phasegraph.spec._loader import builtin_machines, load_machine_family
from phasegraph.testing._examples import machine_examples
from phasegraph.testing._mutants import (
    OPERATORS,
    Verdict,
    check_kills,
    equivalent,
    examples_kill,
    kill_table,
    machine_mutants,
    machine_text,
    shipped_verdicts,
)

# The fewest mutants `check --strict` alone kills, per operator, of the shipped machines
# (each on its own) and of the shipped graphs (the machines in place, with each node's
# settings and bindings).
KILLED_BY_CHECK = {
    "machines": {
        "drop-transition": 43,
        "delete-error-handler": 33,
        "redirect-transition": 394,
        "flip-guard": 28,
        "flip-outcome": 0,
        "make-non-final": 36,
        "move-spend": 39,
        "limit-off-by-one": 0,
        "drop-source": 23,
        "swap-priority": 40,
        "other-outcome": 0,
        "retrigger": 235,
    },
    "graphs": {
        "drop-transition": 42,
        "delete-error-handler": 38,
        "redirect-transition": 303,
        "flip-guard": 13,
        "flip-outcome": 10,
        "make-non-final": 37,
        "move-spend": 13,
        "limit-off-by-one": 0,
        "drop-source": 32,
        "swap-priority": 25,
        "other-outcome": 10,
        "retrigger": 192,
    },
}

# The fewest mutants `check --strict` or `phasegraph test` (the machines' examples) kill.
# The shipped machines' examples take every transition from each of its sources and run
# every budget out at its default limit, so the later operators are killed too.
KILLED = {
    "machines": {
        "drop-transition": 107,
        "delete-error-handler": 62,
        "redirect-transition": 957,
        "flip-guard": 79,
        "flip-outcome": 44,
        "make-non-final": 44,
        "move-spend": 59,
        "limit-off-by-one": 44,
        "drop-source": 76,
        "swap-priority": 53,
        "other-outcome": 42,
        "retrigger": 308,
    },
    "graphs": {
        "drop-transition": 65,
        "delete-error-handler": 56,
        "redirect-transition": 626,
        "flip-guard": 48,
        "flip-outcome": 41,
        "make-non-final": 41,
        "move-spend": 26,
        "limit-off-by-one": 22,
        "drop-source": 53,
        "swap-priority": 31,
        "other-outcome": 41,
        "retrigger": 236,
    },
}

# The share of the mutants not shown equivalent that check or test must kill.
LEAST_KILLED = 0.95

# Every mutant check spares that is shown to behave as its original, and why.
_SAME_END = "failed and rejected are both final with outcome failed: the node ends the same way"


def _never(index: int, source: str) -> str:
    return (
        f"no run takes transition {index} from {source} (under any setting, limit or "
        "payload): dropping that source changes nothing"
    )


_DISABLED = {  # recovery disabled: `retry` is never reached, so these never fire from it
    "fallback_chain: drop source retry of transition 2 `error` main,retry -> reraise": 2,
    "fallback_chain: drop source retry of transition 3 `error` main,retry -> emergency": 3,
    "fallback_chain: drop source retry of transition 7 `fail` main,retry -> reraise": 7,
    "fallback_chain: drop source retry of transition 8 `fail` main,retry -> emergency": 8,
}
EQUIVALENT = {
    "spec_review: redirect transition 1 `fail` planning -> failed to rejected": _SAME_END,
    "spec_review: redirect transition 4 `invalid` spec_generated -> failed to rejected": _SAME_END,
    "coding_task: spec_review: redirect transition 1 `fail` planning -> failed to rejected": (
        _SAME_END
    ),
    "coding_task: spec_review: redirect transition 4 `invalid` spec_generated -> failed to "
    "rejected": _SAME_END,
    **{key: _never(index, "retry") for key, index in _DISABLED.items()},
    **{f"agent_pipeline: {key}": _never(index, "retry") for key, index in _DISABLED.items()},
    **{
        f"{machine}: drop source retry of transition {index} `{trigger}` main,retry -> "
        "emergency": _never(index, "retry")
        for machine in ("guarded_agent", "guarded_quality_loop")
        for index, trigger in ((2, "gave_up"), (3, "failed"))
    },
    "loop: swap transition 0 `again` work -> work with transition 1": (
        "transitions 0 and the one it is swapped with never hold together (budget:steps is "
        "required by one and excluded by the other): their order changes nothing"
    ),
}

# Every mutant neither check nor test kills, and why no example could: the agent's
# `tokens` budget is spent by the llm action's token usage, never by entering a state,
# so no example (which steps the machine) can run it out.
_TOKENS = "agent: budget tokens limit {} instead of 100000000"
SURVIVORS = {
    f"{graph}{_TOKENS.format(limit)}"
    for graph in ("", "coding_task: ", "git_agent: ", "research_agent: ")
    for limit in (100000001, 99999999)
}


def _families() -> dict[str, tuple[MachineDef, dict[str, MachineDef]]]:
    return {name: load_machine_family(name) for name in builtin_machines()}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, list[Verdict]]:
    """Every mutant of the shipped machines and graphs, and what kills it."""
    return shipped_verdicts()


def _counts(found: list[Verdict], killed: str) -> Counter[str]:
    return Counter(v.mutant.operator for v in found if getattr(v, killed))


@pytest.mark.parametrize("kind", ["machines", "graphs"])
def test_check_or_test_kill_at_least_the_recorded_mutants(
    verdicts: dict[str, list[Verdict]], kind: str
) -> None:
    table = kill_table(verdicts[kind])
    by_check, either = _counts(verdicts[kind], "by_check"), _counts(verdicts[kind], "killed")
    for operator in OPERATORS:
        assert by_check[operator] >= KILLED_BY_CHECK[kind][operator], table
        assert either[operator] >= KILLED[kind][operator], table


@pytest.mark.parametrize("kind", ["machines", "graphs"])
def test_check_or_test_kill_nearly_every_mutant_not_equivalent(
    verdicts: dict[str, list[Verdict]], kind: str
) -> None:
    live = [v for v in verdicts[kind] if v.by_check or equivalent(v.mutant) is None]
    killed = sum(v.killed for v in live)
    assert killed >= LEAST_KILLED * len(live), kill_table(verdicts[kind])


# The operators added after the first set, from an independent tester's list: what a
# typo or a reordering changes. The examples take each transition from each source and
# run each budget out at its default limit, so these are killed as well.
LATER_OPERATORS = frozenset(
    {"limit-off-by-one", "drop-source", "swap-priority", "other-outcome", "retrigger"}
)


@pytest.mark.parametrize("kind", ["machines", "graphs"])
def test_the_later_operators_kill_nearly_every_mutant_not_equivalent(
    verdicts: dict[str, list[Verdict]], kind: str
) -> None:
    later = [v for v in verdicts[kind] if v.mutant.operator in LATER_OPERATORS]
    live = [v for v in later if v.by_check or equivalent(v.mutant) is None]
    assert live
    assert sum(v.killed for v in live) >= LEAST_KILLED * len(live), kill_table(verdicts[kind])


def test_every_operator_makes_mutants_of_the_shipped_machines(
    verdicts: dict[str, list[Verdict]],
) -> None:
    made = {v.mutant.operator for v in verdicts["machines"]}
    assert made == set(OPERATORS)
    keys = [v.mutant.key for v in verdicts["machines"] + verdicts["graphs"]]
    assert len(keys) == len(set(keys))  # each mutant is named apart


def test_final_states_made_non_final_are_always_killed_by_check(
    verdicts: dict[str, list[Verdict]],
) -> None:
    """A state with no way out that ends nothing: every node reaching it never finishes."""
    found = verdicts["machines"] + verdicts["graphs"]
    assert all(v.by_check for v in found if v.mutant.operator == "make-non-final")


def test_the_equivalent_mutants_are_listed_with_their_reason(
    verdicts: dict[str, list[Verdict]],
) -> None:
    found = verdicts["machines"] + verdicts["graphs"]
    spared = [v for v in found if not v.by_check]
    assert {v.mutant.key: r for v in spared if (r := equivalent(v.mutant))} == EQUIVALENT


def test_the_survivors_are_listed_with_their_reason(verdicts: dict[str, list[Verdict]]) -> None:
    found = verdicts["machines"] + verdicts["graphs"]
    survivors = {v.mutant.key for v in found if not v.killed and equivalent(v.mutant) is None}
    assert survivors == SURVIVORS


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


def _main(*args: str) -> subprocess.CompletedProcess[str]:
    main = "import sys; from phasegraph.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", main, *args], capture_output=True, text=True, check=False
    )


def test_phasegraph_test_on_the_command_line_kills_what_check_spares(tmp_path: Path) -> None:
    """A mutant check passes, written out with its original's examples: `test` fails it."""
    root, family = load_machine_family("loop")
    examples = machine_examples(root)
    mutants = {m.key: m for m in machine_mutants(root)}
    survivor = mutants["loop: final state exhausted ends success instead of failed"]
    assert not check_kills(survivor, family)
    assert examples_kill(survivor, examples, family)
    for name, machine, status in (("original", root, 0), ("mutant", survivor.machine, 1)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(machine_text(machine, examples), encoding="utf-8")
        done = _main("test", str(path))
        assert done.returncode == status, done.stdout + done.stderr
    assert "ok      check: the definition passes `phasegraph check`" in done.stdout
    assert _main("check", "--strict", str(path)).returncode == 0
    assert "FAILED  examples" in done.stdout
    assert "expected to end failed, but it ended success" in done.stdout
    assert "expected: work --again--> work --again--> exhausted (ended failed)" in done.stdout
    assert "actual:   work --again--> work --again--> exhausted (ended success)" in done.stdout


_WITH_EXAMPLES = [
    (m, family)
    for root, family in _families().values()
    if machine_examples(root)
    for m in machine_mutants(root)
    if all(s.machine is None for s in root.states.values())
]


@settings(max_examples=15)
@given(index=st.integers(min_value=0, max_value=len(_WITH_EXAMPLES) - 1))
def test_the_in_process_verdict_is_the_verdict_of_test_on_the_file(
    tmp_path_factory: pytest.TempPathFactory, index: int
) -> None:
    from phasegraph.testing import verify

    mutant, family = _WITH_EXAMPLES[index]
    examples = machine_examples(mutant.original)
    path = tmp_path_factory.mktemp("mutant") / "mutant.yaml"
    path.write_text(machine_text(mutant.machine, examples), encoding="utf-8")
    results = {r.name: r for r in verify(path, crash=False)}
    assert (not results["examples"].ok) == examples_kill(mutant, examples, family), mutant.key
