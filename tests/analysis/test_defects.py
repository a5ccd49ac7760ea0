"""The planted-defect and mutation suite: `phasegraph check --strict` and `phasegraph
test` must catch each defect a real author makes, each mutant of a shipped machine, and
pass every correct definition (no false positives). Run in fresh interpreters, the
command line as CI runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from builders import TESTS
from phasegraph.spec._loader import builtin_graphs, builtin_machines, machine_source

DEFECTS = TESTS / "fixtures" / "defects"
FIXED = TESTS / "fixtures" / "check" / "fixed"

# (file, the finding code that must report it)
PLANTED = [
    ("gap_payload.yaml", "guard-gap"),
    ("gap_budget.yaml", "guard-gap"),
    ("gap_setting.yaml", "guard-gap"),
    ("shadowed.yaml", "shadowed-transition"),
    ("dead.yaml", "dead-transition"),
    ("unbounded_loop.yaml", "unbounded-cycle"),
    ("budget_on_final.yaml", "unbounded-cycle"),
    ("outcome_unreachable.yaml", "outcome-unreachable"),
    ("overlap.yaml", "overlapping-guards"),
    ("nested_gap.yaml", "outcome-not-accepted"),
    ("gate_timeout.yaml", "gate-timeout-unhandled"),
    ("capture_race.yaml", "write-conflict"),
    ("unknown_middleware.yaml", "refused-by-run"),
    ("misspelt_phase.yaml", "refused-by-run"),
    ("empty_tools.yaml", "refused-by-run"),
    ("unimportable.yaml", "refused-by-run"),
    ("shadowed_builtin/parent.yaml", "shadowed-machine-file"),
]

# Defects only running the graph's own actions finds (check passes them).
RUN_ONLY = [("keeps_state.yaml", "crash-equivalence")]

# Which `phasegraph test` property fails for each planted defect (None: test passes it;
# the shadowed file is a warning, which only `check --strict` fails on).
TEST_PROPERTY = {
    "gap_payload.yaml": "liveness",
    "gap_budget.yaml": "liveness",
    "gap_setting.yaml": "liveness",
    "shadowed.yaml": "check",
    "dead.yaml": "outcomes",
    "unbounded_loop.yaml": "termination",
    "budget_on_final.yaml": "termination",
    "outcome_unreachable.yaml": "outcomes",
    "overlap.yaml": "check",
    "nested_gap.yaml": "liveness",
    "gate_timeout.yaml": "check",
    "capture_race.yaml": "check",
    "unknown_middleware.yaml": "check",
    "misspelt_phase.yaml": "check",
    "empty_tools.yaml": "check",
    "unimportable.yaml": "check",
    "shadowed_builtin/parent.yaml": None,
    "keeps_state.yaml": "crash-equivalence",
}

# (shipped machine, regex, replacement, the finding code that must report the mutant)
MUTANTS = [
    (
        "quality_loop",
        r"^  - \{trigger: fail, source: verify, dest: gave_up_after_reflections\}\n",
        "",
        "guard-gap",
    ),
    (
        "quality_loop",
        r"^  - \{trigger: continue, source: execute, dest: gave_up_after_reflections\}\n",
        "",
        "guard-gap",
    ),
    (
        "quality_loop",
        r"^  - \{trigger: retry, source: reflect, dest: gave_up_after_reflections\}\n",
        "",
        "guard-gap",
    ),
    ("quality_loop", r"spend_on: \[execute\]", "spend_on: [completed]", "unbounded-cycle"),
    (
        "quality_loop",
        r"\{trigger: pass, source: verify, dest: completed\}",
        "{trigger: pass, source: verify, dest: reflect}",
        "outcome-unreachable",
    ),
    (
        "fallback_chain",
        r"^  - \{trigger: fail, source: \[main, retry\], dest: emergency\}\n",
        "",
        "guard-gap",
    ),
    ("fallback_chain", r"spend_on: \[recovery\]", "spend_on: [failed]", "unbounded-cycle"),
    (
        "spec_review",
        r"^  - \{trigger: reject, source: \[review_pending, parked\], dest: rejected\}\n",
        "",
        "guard-gap",
    ),
    (
        "spec_review",
        r"^  - \{trigger: invalid, source: spec_generated, dest: failed\}\n",
        "",
        "guard-gap",
    ),
    (
        "team_phase",
        r"^  - \{trigger: fail, source: running, dest: checkpointing_failed\}\n",
        "",
        "guard-gap",
    ),
    (
        "loop",
        r"^  - \{trigger: again, source: work, dest: exhausted, unless: \[\"budget:steps\"\]\}\n",
        "",
        "guard-gap",
    ),
    (
        "solo_phases",
        r"^  - \{trigger: work, source: delivery, dest: exhausted\}\n",
        "",
        "guard-gap",
    ),
    (
        "guarded_quality_loop",
        r"^  - \{trigger: gave_up, source: \[main, retry\], dest: emergency\}\n",
        "",
        "guard-gap",
    ),
    (
        "quality_loop",
        r"\{trigger: continue, source: execute, dest: verify, conditions: \[\"budget:verify\"\]\}",
        '{trigger: continue, source: execute, dest: verify, conditions: ["budget:verify"], '
        'unless: ["budget:verify"]}',
        "dead-transition",
    ),
]

_MAIN = "import sys; from phasegraph.cli import main; sys.exit(main())"

CORRECT = [
    *builtin_machines(),
    *builtin_graphs(),
    *sorted(str(p) for p in FIXED.glob("*.yaml") if p.name != "stays_machine.yaml"),
    str(TESTS / "fixtures" / "crash_ok" / "reviewed.yaml"),
]


def _mutant(tmp_path: Path, name: str, pattern: str, replacement: str) -> Path:
    text = machine_source(name).read_text(encoding="utf-8")
    mutated = re.sub(pattern, lambda _: replacement, text, flags=re.M)
    assert mutated != text, f"the mutation {pattern!r} no longer applies to {name}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(mutated, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def planted() -> dict[str, tuple[int, set[object]]]:
    """Every planted defect checked, each file on its own, in one fresh interpreter."""
    return _by_file([DEFECTS / name for name, _ in PLANTED])


@pytest.fixture(scope="module")
def mutants(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, set[object]]]:
    paths = [
        _mutant(tmp_path_factory.mktemp("mutant"), name, pattern, replacement)
        for name, pattern, replacement, _ in MUTANTS
    ]
    found = _by_file(paths)
    return [found[str(path)] for path in paths]


@pytest.fixture(scope="module")
def tested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """`phasegraph test` (verify) on every planted defect and mutant: failed properties."""
    folder = tmp_path_factory.mktemp("tested")
    paths = [str(DEFECTS / name) for name in TEST_PROPERTY]
    paths += [
        str(_mutant(tmp_path_factory.mktemp("tmutant"), name, pattern, replacement))
        for name, pattern, replacement, _ in MUTANTS
    ]
    script = (
        "import json, sys\n"
        "from phasegraph.testing import verify\n"
        "print(json.dumps({t: [r.name for r in verify(t) if not r.ok] for t in sys.argv[1:]}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *paths],
        capture_output=True,
        text=True,
        check=True,
        cwd=folder,
    )
    return {target: set(failed) for target, failed in json.loads(done.stdout).items()}


def _by_file(paths: list[Path]) -> dict[str, tuple[int, set[object]]]:
    """Each file checked alone (its exit status), but in one interpreter for speed."""
    script = (
        "import json, sys\n"
        "from phasegraph.analysis import check\n"
        "out = {}\n"
        "for target in sys.argv[1:]:\n"
        "    report = check(target)\n"
        "    out[target] = [f.to_json() for f in report.findings]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(done.stdout)
    return {
        target: (1 if findings else 0, {f["code"] for f in findings})
        for target, findings in found.items()
    }


def test_the_suite_has_the_promised_size() -> None:
    assert len(PLANTED) >= 15
    assert len(MUTANTS) >= 10


@pytest.mark.parametrize(("name", "code"), PLANTED)
def test_check_strict_catches_each_planted_defect(
    planted: dict[str, tuple[int, set[object]]], name: str, code: str
) -> None:
    status, codes = planted[str(DEFECTS / name)]
    assert status == 1
    assert code in codes, codes


@pytest.mark.parametrize(("index", "code"), [(i, m[3]) for i, m in enumerate(MUTANTS)])
def test_check_strict_catches_each_mutant_of_a_shipped_machine(
    mutants: list[tuple[int, set[object]]], index: int, code: str
) -> None:
    status, codes = mutants[index]
    assert status == 1
    assert code in codes, codes


def test_check_strict_passes_every_correct_definition() -> None:
    """The real command, as CI runs it: every correct definition at once, exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "check", "--strict", "--json", *CORRECT],
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(done.stdout) == []
    assert done.returncode == 0


def test_check_strict_fails_on_a_warning_and_annotates_it_for_ci() -> None:
    target = DEFECTS / "shadowed_builtin" / "parent.yaml"
    plain = subprocess.run(
        [sys.executable, "-c", _MAIN, "check", str(target)], capture_output=True, text=True
    )
    assert plain.returncode == 0
    strict = subprocess.run(
        [sys.executable, "-c", _MAIN, "check", "--strict", "--annotations", "github", str(target)],
        capture_output=True,
        text=True,
    )
    assert strict.returncode == 1
    [line] = strict.stdout.splitlines()
    assert line.startswith(f"::warning file={target},line=5,col=3,title=shadowed-machine-file::")


@pytest.mark.parametrize(("name", "prop"), sorted(TEST_PROPERTY.items()))
def test_phasegraph_test_catches_each_planted_defect(
    tested: dict[str, set[str]], name: str, prop: str | None
) -> None:
    failed = tested[str(DEFECTS / name)]
    if prop is None:
        assert failed == set()
    else:
        assert prop in failed, failed


def test_phasegraph_test_catches_every_mutant(tested: dict[str, set[str]]) -> None:
    mutated = [failed for target, failed in tested.items() if "tmutant" in target]
    assert len(mutated) == len(MUTANTS)
    assert all(mutated), mutated


def test_check_passes_what_only_running_the_actions_finds(
    planted: dict[str, tuple[int, set[object]]],
) -> None:
    """keeps_state loads, prepares and explores clean: only crash-equivalence finds it."""
    found = _by_file([DEFECTS / name for name, _ in RUN_ONLY])
    assert all(status == 0 for status, _ in found.values())


def test_a_graph_file_named_like_a_builtin_machine_is_not_taken_for_one(tmp_path: Path) -> None:
    # loop.yaml here is a graph (as benchmarks/loop.yaml is): nothing shadows the built-in.
    graph = (
        "graph: {name}\nnodes:\n  - id: a\n    machine: loop\n    bind:\n"
        '      work: {{python: "m:f", triggers: [again, stop]}}\n'
    )
    (tmp_path / "loop.yaml").write_text(graph.format(name="a_loop"))
    (tmp_path / "other.yaml").write_text(graph.format(name="other"))
    (tmp_path / "m.py").write_text("async def f(ctx):\n    return 'stop'\n")
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "check", "--strict", "loop.yaml", "other.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shadow" not in done.stdout + done.stderr
    # A machine file of that name is what the warning is for.
    (tmp_path / "loop.yaml").write_text(
        "machine: loop\ninitial: a\nstates:\n  a: {final: success}\n"
    )
    warned = subprocess.run(
        [sys.executable, "-c", _MAIN, "check", "--strict", "other.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert warned.returncode == 1
    assert "is the built-in machine, not the file loop.yaml beside" in warned.stdout
