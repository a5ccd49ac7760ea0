"""Mistakes authors really make, each caught by ``check --strict`` (and refused by ``run``).

``tests/fixtures/authors/bad`` holds small definitions written the way users write them,
each with one mistake and a first line ``# expect: TEXT`` quoting the error it must get:
unknown ``with:`` keys and budget overrides, a shell ``on_exit`` whose fallback the state
refuses, tool rules that take away the only way to succeed, a template read racing a
write, and a template (or gate payload) naming a key nothing writes. ``good`` holds
correct definitions of the same kinds, which must get no finding at all.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from builders import cli_argv
from phasegraph.analysis import Severity, check
from phasegraph.errors import SpecError
from phasegraph.spec import load_graph

AUTHORS = Path(__file__).parent.parent / "fixtures" / "authors"
BAD = sorted((AUTHORS / "bad").glob("*.yaml"))
GOOD = sorted((AUTHORS / "good").glob("*.yaml"))
ROOT = Path(__file__).parent.parent.parent
# Every rule but the tool-rule proof is applied when a graph loads, by `run` too.
LOADED = [path for path in BAD if not path.stem.startswith("advance")]


def _expected(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), path
    return first.removeprefix("# expect: ")


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv(*args), capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


def test_there_are_enough_of_each() -> None:
    assert len(GOOD) >= 20
    classes = {path.stem.split("_")[0] for path in BAD}
    assert {"budget", "setting", "exit", "advance", "read", "payload", "url", "prompt"} <= classes


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_each_mistake_is_an_error_that_says_what_to_do(path: Path) -> None:
    report = check(path)
    errors = [f.message for f in report.findings if f.severity is Severity.ERROR]
    assert any(_expected(path) in message for message in errors), errors
    assert report.errors == 1, errors  # one mistake, one error: nothing else is noise


@pytest.mark.parametrize("path", LOADED, ids=[p.stem for p in LOADED])
def test_run_refuses_what_check_reports_with_the_same_message(path: Path) -> None:
    with pytest.raises(SpecError) as refused:
        load_graph(path)
    assert [_expected(path) in p.message for p in refused.value.problems] == [True]
    [finding] = check(path).findings
    assert finding.message == refused.value.problems[0].message
    assert finding.location == refused.value.problems[0].location


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_correct_definitions_get_no_finding(path: Path) -> None:
    assert check(path).findings == ()


def test_cli_strict_catches_every_mistake_and_passes_every_correct_definition() -> None:
    bad = _cli("check", "--strict", *map(str, BAD))
    assert bad.returncode == 1, bad.stderr
    for path in BAD:
        assert _expected(path) in bad.stdout, path
    assert bad.stdout.splitlines()[-1] == (
        f"checked {len(BAD)} definitions: {len(BAD)} errors, 0 warnings"
    )
    good = _cli("check", "--strict", *map(str, GOOD))
    assert good.returncode == 0, good.stdout
    assert good.stdout.splitlines() == [f"checked {len(GOOD)} definitions: 0 errors, 0 warnings"]


def test_cli_run_refuses_a_misspelt_budget_override_naming_file_line_and_fix() -> None:
    path = AUTHORS / "bad" / "budget_typo.yaml"
    refused = _cli("run", "--store", "memory://", "-q", str(path))
    assert refused.returncode != 0
    assert f"{path}:6:22: node 'fetch': with.budgets: unknown budget 'retry'" in refused.stderr
    assert "did you mean 'retries'?" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_readme_ci_line_passes_on_the_shipped_files_without_a_warning() -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("states/*.yaml")])
    files += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("graphs/*.yaml"))
    result = _cli("check", "--strict", *files)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [f"checked {len(files)} definitions: 0 errors, 0 warnings"]


def test_a_finding_shared_by_several_targets_is_printed_once(tmp_path: Path) -> None:
    # Two machines nest one that has an unreachable state: one warning, not two.
    (tmp_path / "inner_loop.yaml").write_text(
        "initial: a\nstates:\n  a: {}\n  lost: {}\n  done: {final: success}\n"
        "transitions:\n  - {trigger: ok, source: a, dest: done}\n"
        "  - {trigger: ok, source: lost, dest: done}\n",
        encoding="utf-8",
    )
    for name in ("outer_one", "outer_two"):
        (tmp_path / f"{name}.yaml").write_text(
            "initial: run\nstates:\n  run: {machine: inner_loop}\n  done: {final: success}\n"
            "transitions:\n  - {trigger: success, source: run, dest: done}\n",
            encoding="utf-8",
        )
    result = _cli("check", "outer_one.yaml", "outer_two.yaml", "inner_loop.yaml", cwd=tmp_path)
    warnings = [line for line in result.stdout.splitlines() if "warning:" in line]
    assert len(warnings) == 1, result.stdout
    assert "state 'lost' of machine 'inner_loop' cannot be reached" in warnings[0]
    assert result.stdout.splitlines()[-1] == "checked 3 definitions: 0 errors, 1 warning"


def test_the_shell_fallback_check_names_is_the_one_the_action_fires(tmp_path: Path) -> None:
    # A machine where `fail` leads to success: the run completes only if an unlisted exit
    # status fires exactly the trigger the loader counts among the action's triggers.
    (tmp_path / "tolerant.yaml").write_text(
        "initial: run\nstates:\n  run: {}\n  done: {final: success}\n"
        "transitions:\n  - {trigger: fail, source: run, dest: done}\n"
        "  - {trigger: ok, source: run, dest: done}\n",
        encoding="utf-8",
    )
    (tmp_path / "g.yaml").write_text(
        "machines: [tolerant.yaml]\nnodes:\n  - id: n\n    machine: tolerant\n    bind:\n"
        f"      run: {{shell: [{sys.executable!r}, -c, 'raise SystemExit(3)'], "
        "on_exit: {0: ok}}\n",
        encoding="utf-8",
    )
    assert _cli("check", "--strict", "g.yaml", cwd=tmp_path).returncode == 0
    ran = _cli("run", "--store", "memory://", "-q", "--json", "g.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert '"completed"' in ran.stdout
