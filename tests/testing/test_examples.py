"""Machine examples (`examples:`): validated by `phasegraph check`, run by `phasegraph test`
through the engine's own stepping, and written for every shipped machine."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegraph.analysis import Severity, check
from phasegraph.core._machine import compile_machines
from phasegraph.errors import IllegalTriggerError
from phasegraph.model import PATH_SEPARATOR, MachineDef
from phasegraph.spec._loader import builtin_machines, load_machine_family
from phasegraph.testing._examples import (
    Example,
    ExampleStep,
    coverage,
    machine_examples,
    run_examples,
)

_REVIEW = """\
machine: review
initial: draft
budgets:
  rounds: {limit: 2, spend_on: [draft]}
states:
  draft: {hook: write}
  review: {hook: judge}
  shipped: {final: success}
  dropped: {final: failed}
transitions:
  - {trigger: submit, source: draft, dest: review}
  - {trigger: judged, source: review, dest: shipped, conditions: ["payload:approved"]}
  - {trigger: judged, source: review, dest: draft, conditions: ["budget:rounds"]}
  - {trigger: judged, source: review, dest: dropped}
examples:
"""

_GOOD = """\
  - name: approved at once
    steps: [submit -> review, {trigger: judged, payload: {approved: true}, to: shipped}]
    outcome: success
    spent: {rounds: 1}
  - name: a second round, then dropped
    steps: [submit -> review, judged -> draft, submit -> review, judged -> dropped]
    outcome: failed
    spent: {rounds: 2}
  - name: with one round only, a rejection drops it
    with: {budgets: {rounds: 1}}
    steps: [submit -> review, judged -> dropped]
    outcome: failed
"""


def _main(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    main = "import sys; from phasegraph.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", main, *args], capture_output=True, text=True, check=False, cwd=cwd
    )


def _write(tmp_path: Path, examples: str) -> Path:
    path = tmp_path / "review.yaml"
    path.write_text(_REVIEW + examples, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", builtin_machines())
def test_every_shipped_machine_states_examples_that_hold_and_take_every_transition(
    name: str,
) -> None:
    root, family = load_machine_family(name)
    examples = machine_examples(root)
    assert examples, f"{name} declares no examples"
    results = list(run_examples(examples, family))
    assert [r.failure for r in results if not r.ok] == []
    assert coverage({name: root}, results, family) == []
    assert {e.outcome for e in examples} >= {
        str(s.final) for s in root.states.values() if s.final is not None
    }


def test_a_users_examples_that_hold_pass_phasegraph_test(tmp_path: Path) -> None:
    _write(tmp_path, _GOOD)
    done = _main(tmp_path, "test", "review.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      examples: every declared example behaves as stated" in done.stdout
    assert "3 of 3 examples hold; they take 4 of the 4 transitions of review" in done.stdout


def test_a_wrong_example_fails_phasegraph_test_with_its_trace(tmp_path: Path) -> None:
    """The author meant a rejection to go back to drafting; the machine drops it."""
    wrong = """\
  - name: a rejection is redrafted
    with: {budgets: {rounds: 1}}
    steps: [submit -> review, judged -> draft]
"""
    _write(tmp_path, wrong)
    done = _main(tmp_path, "test", "review.yaml")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "FAILED  examples: every declared example behaves as stated" in out
    assert (
        "review.yaml:16:5: example 'a rejection is redrafted' of machine 'review': step 2 "
        "enters 'dropped', not 'draft' (at review.yaml:18:31)"
    ) in out
    assert "expected: draft --submit--> review --judged--> draft\n" in out
    assert "actual:   draft --submit--> review --judged--> dropped (ended failed)\n" in out
    assert "no example of 'review' takes transition 1 `judged` review -> shipped" in out
    assert "Traceback" not in done.stderr
    as_json = json.loads(_main(tmp_path, "test", "--json", "review.yaml").stdout)
    (examples,) = [r for r in as_json if r["property"] == "examples"]
    assert not examples["ok"]
    assert "expected: draft --submit--> review --judged--> draft" in examples["details"][0]


@pytest.mark.parametrize(
    ("example", "line", "message"),
    [
        (
            "  - name: x\n    steps: [sumbit -> review]\n",
            17,
            "example 'x' fires unknown trigger 'sumbit' (triggers: judged, submit); "
            "did you mean 'submit'?",
        ),
        (
            "  - name: x\n    steps: [submit -> reviw]\n",
            17,
            "example 'x' enters unknown state 'reviw' (states: draft, dropped, review, "
            "shipped); did you mean 'review'?",
        ),
        (
            "  - name: x\n    steps: [submit -> review]\n    outcom: failed\n",
            18,
            "examples[0].outcom: unknown key 'outcom'; did you mean 'outcome'?",
        ),
        (
            "  - name: x\n    steps: [{trigger: judged, payload: {aproved: true}, to: shipped}]\n",
            17,
            "example 'x' sets payload key 'aproved' (guards read: approved); "
            "did you mean 'approved'?",
        ),
        (
            "  - name: x\n    steps: [submit review]\n",
            17,
            "'submit review' is not a valid step: write TRIGGER -> STATE",
        ),
        (
            "  - name: x\n    with: {budgets: {round: 3}}\n    steps: [submit -> review]\n",
            17,
            "example 'x': with.budgets: unknown budget 'round' (budgets of its machines: "
            "rounds); did you mean 'rounds'?",
        ),
        (
            "  - name: x\n    with: {rounds: 3}\n    steps: [submit -> review]\n",
            17,
            "example 'x': with.rounds: 'rounds' is a budget of machine 'review', and a "
            "budget's limit is set under `budgets:`",
        ),
        (
            "  - name: x\n    steps: [submit -> review]\n    spent: {round: 1}\n",
            18,
            "example 'x' counts unknown budget 'round' (budgets: rounds); did you mean 'rounds'?",
        ),
        (
            "  - name: x\n    steps: [submit -> review]\n"
            "  - name: x\n    steps: [submit -> review]\n",
            18,
            "example #1 is named 'x' too: rename one",
        ),
    ],
)
def test_a_mistaken_example_is_one_error_naming_file_and_line(
    tmp_path: Path, example: str, line: int, message: str
) -> None:
    path = _write(tmp_path, example)
    findings = [f for f in check(path).findings if f.severity is Severity.ERROR]
    assert len(findings) == 1, [str(f) for f in findings]
    shown = str(findings[0])
    assert shown.startswith(f"{path}:{line}:"), shown
    assert message in shown


def test_check_on_the_command_line_names_the_mistake(tmp_path: Path) -> None:
    _write(tmp_path, "  - name: x\n    steps: [sumbit -> review]\n")
    done = _main(tmp_path, "check", "review.yaml")
    assert done.returncode == 1
    assert done.stdout.startswith("review.yaml:17:")
    assert "did you mean 'submit'?" in done.stdout
    assert "Traceback" not in done.stderr


def test_an_example_of_a_nested_machine_names_the_nested_state() -> None:
    _, family = load_machine_family("guarded_agent")
    step = ExampleStep("answer", "main/act")
    wrong = Example("guarded_agent", "answers are acts", (step,), location=None)
    (result,) = run_examples([wrong], family)
    assert result.failure is not None
    assert "step 1 enters 'done', not 'main/act'" in result.failure
    assert "expected: main/think --answer--> main/act" in result.failure
    assert "actual:   main/think --answer--> done (ended success)" in result.failure


def test_a_trigger_the_state_does_not_declare_is_a_refusal_not_a_traceback() -> None:
    _, family = load_machine_family("guarded_agent")
    example = Example("guarded_agent", "x", (ExampleStep("pass", "done"),), outcome="success")
    (result,) = run_examples([example], family)
    assert result.failure is not None
    assert "main/think --pass--> refused" in result.failure
    assert "step 1:" in result.failure


# --------------------------------------------------------------------------- properties


def _walk(
    root: MachineDef, family: dict[str, MachineDef], choices: list[int], limit: int
) -> Example:
    """An example written from a walk of the machine itself (limits lowered to ``limit``)."""
    machines = compile_machines(family)
    budgets = {b.name: limit for m in family.values() for b in m.budgets.values()}
    settings: dict[str, Any] = {"budgets": budgets}
    result = machines.start(root.name, "walk", settings)
    steps = []
    for choice in choices:
        if result.outcome is not None:
            break
        legal = machines.legal_triggers(root.name, result.position.path)
        trigger = legal[choice % len(legal)]
        payload = {"retryable": bool(choice & 1), "approved": bool(choice & 2)}
        try:
            result = machines.step(
                root.name,
                result.position,
                trigger,
                node_id="walk",
                settings=settings,
                payload=payload,
            )
        except IllegalTriggerError:
            break  # every guard refuses: the walk stops before it
        to = PATH_SEPARATOR.join(result.position.path)
        steps.append(ExampleStep(trigger, to, payload))
    outcome = None if result.outcome is None else str(result.outcome)
    spent = dict(result.position.counters)
    return Example(root.name, "walk", tuple(steps), outcome, spent, settings)


_FAMILIES = {name: load_machine_family(name) for name in builtin_machines()}


@settings(max_examples=40)
@given(
    name=st.sampled_from(sorted(_FAMILIES)),
    choices=st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=14),
    limit=st.integers(min_value=1, max_value=3),
)
def test_an_example_written_from_a_walk_of_the_machine_holds_on_it(
    name: str, choices: list[int], limit: int
) -> None:
    root, family = _FAMILIES[name]
    example = _walk(root, family, choices, limit)
    if not example.steps:
        return
    (result,) = run_examples([example], family)
    assert result.ok, result.failure
    # Naming any other state for the last step makes it fail, and says where it went.
    last = example.steps[-1]
    other = next(s for s in root.states if s != last.to.split(PATH_SEPARATOR)[0])
    changed = (*example.steps[:-1], ExampleStep(last.trigger, other, last.payload))
    wrong = Example(root.name, "walk", changed, example.outcome, None, example.settings)
    (result,) = run_examples([wrong], family)
    assert result.failure is not None
    assert f"enters {last.to!r}, not {other!r}" in result.failure


def test_an_examples_settings_are_judged_with_the_machines_it_nests(tmp_path: Path) -> None:
    """A misspelt switch would leave a guard reading nothing: refused as a node's would be."""
    from phasegraph.spec._loader import machine_source

    text = machine_source("guarded_agent").read_text(encoding="utf-8")
    misspelt = text.replace(
        "with: {recovery: {enabled: false}}", "with: {recovry: {enabled: false}}"
    )
    path = tmp_path / "guarded_agent.yaml"
    path.write_text(misspelt, encoding="utf-8")
    findings = [str(f) for f in check(path).findings if f.severity is Severity.ERROR]
    assert len(findings) == 1, findings
    assert findings[0].startswith(f"{path}:")
    assert (
        "example 'with recovery disabled a failed agent goes to the emergency': with.recovry: "
        "nothing reads this setting; did you mean 'recovery' (read by the guards of machine "
        "'guarded_agent')?"
    ) in findings[0]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "retry -> retry/think, answer -> recovered",
            "retry -> retry/thnk, answer -> recovered",
            "enters unknown state 'retry/thnk': machine 'agent' has no state 'thnk' (states: "
            "think, act, done, gave_up, errored); did you mean 'think'?",
        ),
        (
            "compressed -> main/think, compressed -> emergency",
            "compressed -> main, compressed -> emergency",
            "enters 'main', which nests machine 'agent': a node stands in a state of it, e.g. "
            "main/think",
        ),
        (
            "steps: [answer -> done]",
            "steps: [answr -> done]",
            "fires unknown trigger 'answr' (triggers of its machines: advance, answer, "
            "compressed, error, fail, failed, gave_up, observed, retry, success, tool_calls); "
            "did you mean 'answer'?",
        ),
    ],
)
def test_a_step_into_a_nested_machine_is_checked_against_it(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    from phasegraph.spec._loader import machine_source

    text = machine_source("guarded_agent").read_text(encoding="utf-8")
    assert text.count(old) == 1
    path = tmp_path / "guarded_agent.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    findings = [str(f) for f in check(path).findings if f.severity is Severity.ERROR]
    assert len(findings) == 1, findings
    assert findings[0].startswith(f"{path}:")
    assert message in findings[0]


# --------------------------------------------------------------------------- drafts


@pytest.mark.parametrize("name", builtin_machines())
def test_a_draft_of_a_machines_examples_holds_on_it_and_takes_every_transition(
    tmp_path: Path, name: str
) -> None:
    """Drafted from the machine alone (its own examples stripped), the draft is a sound
    machine file's `examples:` that hold and take every transition."""
    from phasegraph.spec._loader import machine_source
    from phasegraph.testing._drafts import draft_examples

    text = machine_source(name).read_text(encoding="utf-8").partition("\nexamples:\n")[0]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    draft = draft_examples(str(path))
    assert draft.startswith("examples:\n")
    assert "no path found" not in draft
    path.write_text(text + "\n" + draft, encoding="utf-8")
    assert [str(f) for f in check(path).findings] == []
    root, family = load_machine_family(path)
    results = list(run_examples(machine_examples(root), family))
    assert all(r.ok for r in results)
    assert coverage({root.name: root}, results, family) == []


def test_draft_examples_on_the_command_line_adds_what_the_declared_ones_miss(
    tmp_path: Path,
) -> None:
    _write(tmp_path, _GOOD.partition("  - name: a second round")[0])
    done = _main(tmp_path, "test", "review.yaml", "--draft-examples")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "  - name: submit, judged, submit, judged ends in dropped\n"
        "    steps: [submit -> review, judged -> draft, submit -> review, judged -> dropped]\n"
        "    outcome: failed\n"
        "    spent: {rounds: 2}\n"
    )
    path = tmp_path / "review.yaml"
    path.write_text(path.read_text(encoding="utf-8") + done.stdout, encoding="utf-8")
    tested = _main(tmp_path, "test", "review.yaml")
    assert "2 of 2 examples hold; they take 4 of the 4 transitions of review" in tested.stdout
    refused = _main(tmp_path, "test", "hello", "--draft-examples")
    assert refused.returncode == 2
    assert "drafts a machine's examples" in refused.stdout


def test_examples_leave_a_graphs_digest_alone(tmp_path: Path) -> None:
    """A run started before an example was written resumes as the same graph."""
    from phasegraph.spec import load_graph

    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "graph: g\nmachines: [./review.yaml]\nnodes:\n  - id: r\n    machine: review\n"
        "    bind:\n      write: {python: 'x:y', triggers: [submit]}\n"
        "      judge: {python: 'x:z', triggers: [judged]}\n",
        encoding="utf-8",
    )
    (tmp_path / "review.yaml").write_text(_REVIEW.replace("examples:\n", ""), encoding="utf-8")
    before = load_graph(graph).digest
    _write(tmp_path, _GOOD)
    assert load_graph(graph).digest == before
    changed = _REVIEW + _GOOD.replace("rounds: 1}", "rounds: 2}")
    (tmp_path / "review.yaml").write_text(changed, encoding="utf-8")
    assert load_graph(graph).digest == before


# --------------------------------------------------------------------------- coverage

_RETRYING = """\
machine: retrying
initial: main
budgets:
  attempts: {limit: 30, spend_on: [retry]}
states:
  main: {hook: work}
  retry: {hook: work}
  done: {final: success}
  failed: {final: failed}
transitions:
  - {trigger: ok, source: [main, retry], dest: done}
  - {trigger: fail, source: [main, retry], dest: retry, conditions: ["budget:attempts"]}
  - {trigger: fail, source: [main, retry], dest: failed}
examples:
  - name: a failure is retried, then succeeds
    steps: [fail -> retry, ok -> done]
    outcome: success
    spent: {attempts: 1}
  - name: with no attempts a failure fails the node
    with: {budgets: {attempts: 0}}
    steps: [fail -> failed]
    outcome: failed
"""


def test_coverage_counts_each_source_and_each_default_limit_and_the_draft_fills_it(
    tmp_path: Path,
) -> None:
    """Every transition is taken, but not from each source, and the default limit of 30 is
    never run out: `test` names both, the draft covers them, and a limit off by one or a
    source dropped is then caught by an example."""
    path = tmp_path / "retrying.yaml"
    path.write_text(_RETRYING, encoding="utf-8")
    done = _main(tmp_path, "test", "retrying.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "2 of 2 examples hold; they take 3 of the 6 transitions of retrying (each from each of "
        "its sources) and run out 0 of the 1 budgets at their default limits"
    ) in done.stdout
    assert "no example of 'retrying' takes transition 0 `ok` main,retry -> done from main" in (
        done.stdout
    )
    assert "takes transition 2 `fail` main,retry -> failed from retry" in done.stdout
    assert "no example of 'retrying' runs budget 'attempts' out at its default limit 30" in (
        done.stdout
    )
    drafted = _main(tmp_path, "test", "retrying.yaml", "--draft-examples")
    assert drafted.returncode == 0, drafted.stderr
    assert "steps: [{trigger: fail, to: retry, times: 30}, fail -> failed]" in drafted.stdout
    assert "no path found" not in drafted.stdout
    path.write_text(_RETRYING + drafted.stdout, encoding="utf-8")
    tested = _main(tmp_path, "test", "retrying.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "take 6 of the 6 transitions" in tested.stdout
    assert "run out 1 of the 1 budgets" in tested.stdout
    assert _main(tmp_path, "check", "--strict", "retrying.yaml").returncode == 0
    # What the draft adds kills what the first examples let through.
    from phasegraph.testing._mutants import examples_kill, machine_mutants

    root, family = load_machine_family(path)
    mutants = {m.change: m for m in machine_mutants(root)}
    first = [e for e in machine_examples(root) if e.name.startswith(("a failure", "with no"))]
    for change in (
        "budget attempts limit 31 instead of 30",
        "budget attempts limit 29 instead of 30",
        "drop source main of transition 0 `ok` main,retry -> done",
        "drop source retry of transition 2 `fail` main,retry -> failed",
    ):
        assert not examples_kill(mutants[change], first, family), change
        assert examples_kill(mutants[change], machine_examples(root), family), change


def test_a_repeated_step_fails_with_the_path_written_short(tmp_path: Path) -> None:
    wrong = _RETRYING + (
        "  - name: thirty retries and still going\n"
        "    steps: [{trigger: fail, to: retry, times: 31}]\n"
    )
    path = tmp_path / "retrying.yaml"
    path.write_text(wrong, encoding="utf-8")
    done = _main(tmp_path, "test", "retrying.yaml")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "step 31 enters 'failed', not 'retry'" in done.stdout
    assert "expected: main --fail--> retry (x31)" in done.stdout
    assert "actual:   main --fail--> retry (x30) --fail--> failed (ended failed)" in done.stdout
    path.write_text(wrong.replace("times: 31", "times: 0"), encoding="utf-8")
    refused = _main(tmp_path, "check", "retrying.yaml")
    assert refused.returncode == 1
    assert "retrying.yaml:" in refused.stdout
    assert "times" in refused.stdout


@settings(max_examples=10, deadline=None)
@given(limit=st.integers(min_value=1, max_value=60), sources=st.integers(min_value=2, max_value=4))
def test_a_draft_runs_any_default_limit_out_and_kills_its_mutants(
    tmp_path_factory: pytest.TempPathFactory, limit: int, sources: int
) -> None:
    """Whatever the default limit and however many sources a handler has, the draft shows
    every goal, holds, and kills each limit off by one and each source dropped."""
    from phasegraph.testing._drafts import draft_examples
    from phasegraph.testing._mutants import examples_kill, machine_mutants

    extra = [f"step{i}" for i in range(sources - 2)]
    chain = ["main", *extra, "retry"]
    states = "".join(f"  {name}: {{hook: work}}\n" for name in chain)
    moves = "".join(
        f"  - {{trigger: next, source: {a}, dest: {b}}}\n"
        for a, b in itertools.pairwise(chain[:-1])
    )
    listed = ", ".join(chain)
    text = (
        f"machine: m\ninitial: main\nbudgets:\n  attempts: {{limit: {limit}, spend_on: [retry]}}\n"
        f"states:\n{states}  done: {{final: success}}\n  failed: {{final: failed}}\n"
        f"transitions:\n{moves}"
        f"  - {{trigger: ok, source: [{listed}], dest: done}}\n"
        f"  - {{trigger: fail, source: [{listed}], dest: retry, "
        'conditions: ["budget:attempts"]}\n'
        f"  - {{trigger: fail, source: [{listed}], dest: failed}}\n"
    )
    path = tmp_path_factory.mktemp("draft") / "m.yaml"
    path.write_text(text, encoding="utf-8")
    draft = draft_examples(str(path))
    assert "no path found" not in draft, draft
    path.write_text(text + draft, encoding="utf-8")
    root, family = load_machine_family(path)
    examples = machine_examples(root)
    results = list(run_examples(examples, family))
    assert all(r.ok for r in results), [r.failure for r in results if not r.ok]
    assert coverage({root.name: root}, results, family) == []
    for mutant in machine_mutants(root, family=family):
        if mutant.operator in ("limit-off-by-one", "drop-source"):
            assert examples_kill(mutant, examples, family), mutant.key
