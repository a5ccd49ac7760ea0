"""Tests for `phasegraph diagram`: Mermaid and dot for machines (nested, finals, guards) and
graphs (one box per layer), labels Mermaid can parse, the README's diagram, the command."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import REPO, TESTS, graph, loop_machine
from phasegraph import cli
from phasegraph.analysis import diagram
from phasegraph.analysis._diagram import draft_diagram, graph_diagram, machine_diagram
from phasegraph.model import MachineDef, NodeOutcome, StateDef, TransitionDef
from phasegraph.spec._loader import builtin_graphs, builtin_machines

NESTED = TESTS / "fixtures" / "check" / "fixed" / "nested_outcome.yaml"
CHECK_BROKEN = TESTS / "fixtures" / "check" / "broken"

# What Mermaid's state-diagram lexer accepts: ids without ':', spaces, '-' or '{'; a
# description after ' : ' without ':' or ';' (see the stateDiagram grammar's ID and DESCR).
_ID = r"[^:\s\-{]+"
_LINE = re.compile(
    rf"^\s*(?:\[\*\] --> {_ID}|{_ID} --> (?:{_ID}|\[\*\])(?: : [^:;\n]+)?|{_ID} : [^:;\n]+"
    rf'|state "[^"]+" as {_ID}(?: {{)?|}})$'
)


def _check_mermaid_states(text: str) -> None:
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    bad = [line for line in lines[1:] if not _LINE.match(line)]
    assert not bad, bad
    assert text.count("{") == text.count("}")


def test_loop_machine_mermaid_marks_initial_finals_and_guards() -> None:
    text = diagram("loop")
    _check_mermaid_states(text)
    assert "    [*] --> s_work\n" in text
    assert "    s_work --> s_work : again [steps left]\n" in text
    assert "    s_work --> s_exhausted : again [no steps left]\n" in text
    assert "    s_done --> [*]\n" in text
    assert "    s_exhausted --> [*]\n" in text
    assert "    s_done : success (final)" in text
    assert "    s_work : spends steps" in text


def test_unguarded_fallback_edge_is_labelled_else() -> None:
    text = diagram("quality_loop")
    assert "s_verify --> s_reflect : fail [reflect left]" in text
    assert "s_verify --> s_gave_up_after_reflections : fail [else]" in text
    assert "s_verify --> s_completed : pass\n" in text


def test_nested_machine_is_a_composite_state() -> None:
    text = diagram(NESTED)
    _check_mermaid_states(text)
    assert '    state "build, runs task" as s_build {\n        [*] --> s_build__run\n' in text
    assert "        s_build__done --> [*]\n        s_build__failed --> [*]\n    }\n" in text
    assert "    s_build --> s_broken : failed\n" in text
    # Mermaid refuses description lines on a composite state.
    assert "s_build : " not in text


def _machine_with(names: list[str]) -> MachineDef:
    states = {
        n: StateDef(name=n, hook=n, description='why: "it; #is" %% direction TB') for n in names
    }
    states["fin"] = StateDef(name="fin", final=NodeOutcome.SUCCESS)
    chain = [*names, "fin"]
    transitions = tuple(
        TransitionDef(trigger="go", source=(a,), dest=b, conditions=("payload:x.y",))
        for a, b in itertools.pairwise(chain)
    )
    return MachineDef(
        name="m", initial=names[0], states=MappingProxyType(states), transitions=transitions
    )


def test_keywords_and_punctuation_never_reach_mermaid_raw() -> None:
    names = ["note", "state", "default", "Default_x", "end", "click", "direction", "s_start"]
    text = machine_diagram("m", {"m": _machine_with(names)})
    _check_mermaid_states(text)
    assert 'state "note" as s_note\n' in text
    assert 'state "default" as s_default\n' in text
    assert "direction TB" not in text
    assert "s_s_start_ " in text  # never Mermaid's own `<composite>_start` id


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,12}", fullmatch=True),
        min_size=1,
        max_size=6,
        unique=True,
    ).filter(lambda names: "fin" not in names)
)
def test_any_state_names_give_parseable_lines(names: list[str]) -> None:
    text = machine_diagram("m", {"m": _machine_with(names)})
    _check_mermaid_states(text)
    ids = re.findall(r'^    state "[^"]+" as (\S+)$', text, re.M)
    assert len(ids) == len(set(ids)) == len(names) + 1


def test_graph_mermaid_has_one_box_per_layer_in_order() -> None:
    text = diagram("hello")
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    boxes = [line.strip() for line in lines if line.strip().startswith("subgraph")]
    assert boxes == [
        "subgraph layer_0 [layer 0]",
        "subgraph layer_1 [layer 1]",
        "subgraph layer_2 [layer 2]",
    ]
    layer_1 = text.split("subgraph layer_1")[1].split("end")[0]
    assert 'n_shout["shout<br/>task<br/>writes shouted"]' in layer_1
    assert 'n_count["count<br/>task<br/>writes letters"]' in layer_1
    assert "    n_plan --> n_shout\n" in text
    assert "    n_count --> n_deliver\n" in text


def test_graph_node_ids_are_safe_and_distinct() -> None:
    text = graph_diagram(graph([("end", []), ("a-b", ["end"]), ("a_b", ["end"])]))
    assert 'n_end["end<br/>task"]' in text
    assert 'n_a_b["a-b<br/>task"]' in text
    assert 'n_a_b_2["a_b<br/>task"]' in text
    assert "    n_end --> n_a_b_2\n" in text


def test_dot_output_for_machines_and_graphs() -> None:
    loop = machine_diagram("loop", {"loop": loop_machine()}, "dot")
    assert loop.startswith("digraph machine {")
    assert '"done" [label="done\\nsuccess (final)", peripheries=2];' in loop
    assert '"work" -> "exhausted" [label="again [no steps left]"];' in loop
    nested = diagram(NESTED, "dot")
    assert 'subgraph "cluster_build" {' in nested
    assert '"build/run" -> "build/done"' in nested
    hello = diagram("hello", "dot")
    assert 'subgraph cluster_layer_1 { label="layer 1";' in hello
    assert '"plan" -> "shout";' in hello


@pytest.mark.parametrize("name", builtin_machines() + builtin_graphs())
def test_every_shipped_definition_draws(name: str) -> None:
    text = diagram(name)
    if name in builtin_machines():
        _check_mermaid_states(text)
    else:
        assert text.startswith("flowchart TD\n")
    assert diagram(name, "dot").startswith("digraph ")


def test_the_checking_guide_shows_the_current_diagram() -> None:
    page = (REPO / "docs" / "guides" / "checking-and-testing.md").read_text(encoding="utf-8")
    block = page.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert block == diagram("quality_loop"), "regenerate: phasegraph diagram quality_loop"


def test_cli_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram", "loop"]) == 0
    assert capsys.readouterr().out == diagram("loop")
    assert cli.main(["diagram", "hello", "--format", "dot"]) == 0
    assert capsys.readouterr().out == diagram("hello", "dot")
    assert cli.main(["diagram", "nowhere"]) == 2
    assert "no built-in machine or graph" in capsys.readouterr().err


# --------------------------------------------------------------------------- findings


DEFECTS = TESTS / "fixtures" / "defects"


def test_shadowed_and_dead_edges_are_marked() -> None:
    shadowed = diagram(DEFECTS / "shadowed.yaml")
    assert "    s_work --> s_retrying : fail [retries left] (shadowed)\n" in shadowed
    assert "    s_work --> s_failed : fail\n" in shadowed  # the edge that wins is plain
    dead = diagram(DEFECTS / "dead.yaml", "dot")
    assert '"run" -> "done" [label="ok [payload.complete, not payload.complete] (dead)", ' in dead
    assert "style=dashed, color=red" in dead


def test_graph_nodes_show_writes_and_human_gates() -> None:
    text = diagram("coding_task")
    assert "spec<br/>spec_review<br/>writes spec<br/>human gate spec_review (spec_review)" in text
    captured = diagram(DEFECTS / "capture_race.yaml", "dot")
    assert '"left" [label="left\\ntask\\nwrites out"];' in captured


def test_a_graph_that_does_not_load_is_drawn_with_its_error() -> None:
    text, problems = draft_diagram(CHECK_BROKEN / "dag_cycle.yaml")
    assert [p.message.split(";")[0] for p in problems] == ["dependency cycle: a -> b -> a"]
    assert "    n_b --> n_a\n    n_a --> n_b\n" in text
    assert 'error_0["error: line 4: dependency cycle: a -> b -> a;' in text


def test_a_machine_that_does_not_load_is_drawn_with_its_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(
        "machine: broken\ninitial: a\nstates:\n  a: {hook: a}\n  done: {final: success}\n"
        "transitions:\n  - {trigger: go, source: a, dest: done, conditions: ['budget:nope']}\n",
        encoding="utf-8",
    )
    text, problems = draft_diagram(path)
    assert len(problems) == 1
    assert "    s_a --> s_done : go [nope left]\n" in text
    assert "    note left of s_a : error - line 7 - predicate 'budget -nope' names unknown" in text
    _check_mermaid_states(text.split("    note left of")[0])


def test_cli_diagram_draws_a_broken_file_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram", str(CHECK_BROKEN / "dag_cycle.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("flowchart TD\n")
    assert "error: " in captured.err
    assert "dependency cycle: a -> b -> a" in captured.err
