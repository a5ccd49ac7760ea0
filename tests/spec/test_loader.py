"""Tests for phasegraph.spec._loader: located problems of every kind, built-ins, conversion."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from builders import REPO, TESTS
from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.errors import ErrorCode, InputError, SourceLocation, SpecError
from phasegraph.model import NodeOutcome, RunStatus
from phasegraph.spec import YamlLimits, load_graph, load_graph_text, load_machine
from phasegraph.spec import _catalog as loader_catalog
from phasegraph.spec._loader import builtin_graphs, builtin_machines, graph_source, machine_source
from phasegraph.store.memory import MemoryStore

FIXTURES = TESTS / "fixtures"
MACHINES = FIXTURES / "machines"
GRAPHS = FIXTURES / "graphs"


def problems(load: Callable[[Any], object], source: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(source)
    assert info.value.code is ErrorCode.SPEC
    return [str(problem) for problem in info.value.problems]


def located(found: list[str], path: Path, line: int, *words: str) -> str:
    """The single problem at ``path:line`` that contains every word."""
    prefix = f"{path}:{line}:"
    hits = [p for p in found if p.startswith(prefix) and all(w in p for w in words)]
    assert len(hits) == 1, f"no single problem at {prefix} with {words} in:\n" + "\n".join(found)
    return hits[0]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- reading


def test_yaml_syntax_error_names_the_line() -> None:
    path = MACHINES / "syntax_error.yaml"
    [problem] = problems(load_machine, path)
    assert problem.startswith(f"{path}:5:7: YAML syntax error")


def test_top_level_that_is_not_a_mapping() -> None:
    path = MACHINES / "not_mapping.yaml"
    located(problems(load_machine, path), path, 1, "is a mapping", "not a list")


def test_empty_file_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.yaml", "# nothing here\n")
    [problem] = problems(load_graph, path)
    assert problem == f"{path}: a graph file is a mapping with `nodes:`, not an empty file"


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    [problem] = problems(load_machine, path)
    assert problem.startswith(f"{path}: cannot read machine file")
    assert "No such file" in problem


def test_unreadable_file_names_the_path(tmp_path: Path) -> None:
    [problem] = problems(load_graph, tmp_path)
    assert problem.startswith(f"{tmp_path}: cannot read graph file")


def test_duplicate_keys_are_a_problem() -> None:
    path = MACHINES / "duplicate_keys.yaml"
    located(problems(load_machine, path), path, 6, "duplicate key 'run'")


# --------------------------------------------------------------------------- machines


def test_schema_violation_names_field_path_and_line() -> None:
    path = MACHINES / "schema_violation.yaml"
    found = problems(load_machine, path)
    located(found, path, 4, "budgets.steps.limit", "valid integer", "'lots'")
    located(found, path, 9, "transitions[0].when", "unknown key 'when'", "trigger, source")
    assert len(found) == 2


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "initial: a\nstates: {a: {final: success}}\ntransitons: []\n")
    located(problems(load_machine, path), path, 3, "unknown key 'transitons'", "'transitions'?")


def test_final_outcome_must_be_known(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "initial: a\nstates:\n  a: {final: done}\n")
    located(problems(load_machine, path), path, 3, "states.a.final", "'success'", "'gave_up'")


def test_initial_must_be_a_state() -> None:
    path = MACHINES / "bad_initial.yaml"
    located(problems(load_machine, path), path, 2, "'strat'", "did you mean 'start'?")


def test_transition_source_and_dest_must_be_states() -> None:
    path = MACHINES / "unknown_states.yaml"
    found = problems(load_machine, path)
    located(found, path, 7, "leaves from unknown state 'runn'", "did you mean 'run'?")
    located(found, path, 8, "enters unknown state 'dnoe'", "did you mean 'done'?")


def test_state_names_may_not_contain_slash_or_dot() -> None:
    path = MACHINES / "bad_state_name.yaml"
    found = problems(load_machine, path)
    located(found, path, 5, "'review/final'", "'/' and '.' are reserved")
    located(found, path, 6, "'v1.done'", "'/' and '.' are reserved")


def test_final_state_has_no_outgoing_transitions() -> None:
    path = MACHINES / "final_outgoing.yaml"
    located(problems(load_machine, path), path, 8, "leaves final state 'done'")


def test_budget_spent_on_unknown_state() -> None:
    path = MACHINES / "bad_budgets.yaml"
    located(problems(load_machine, path), path, 4, "budget 'steps'", "'wrok'", "'work'?")


def test_predicate_naming_unknown_budget() -> None:
    path = MACHINES / "bad_budgets.yaml"
    found = problems(load_machine, path)
    located(found, path, 9, "'budget:stpes'", "did you mean 'steps'?")
    located(found, path, 10, "'budget:other'", "(budgets: steps)")


def test_predicate_syntax(tmp_path: Path) -> None:
    text = """initial: a
states: {a: {}, b: {final: success}}
transitions:
  - {trigger: go, source: a, dest: b, conditions: ["budget steps"]}
"""
    path = write(tmp_path, "m.yaml", text)
    located(problems(load_machine, path), path, 4, "conditions[0]", "budget:NAME")


def test_state_both_final_and_hooked() -> None:
    path = MACHINES / "final_hooked.yaml"
    located(problems(load_machine, path), path, 5, "both final and hooked")


def test_nested_machine_must_exist() -> None:
    path = MACHINES / "nests_unknown.yaml"
    located(problems(load_machine, path), path, 4, "unknown machine 'tsak'", "'task'?")


def test_nested_machine_recursion_names_the_chain() -> None:
    found = problems(load_graph, GRAPHS / "recursive.yaml")
    located(found, MACHINES / "pong.yaml", 4, "nested machines recurse: ping -> pong -> ping")


def test_nested_machine_recursion_of_a_machine_file() -> None:
    found = problems(load_machine, MACHINES / "ping.yaml")
    located(found, MACHINES / "pong.yaml", 4, "ping -> pong -> ping")


def test_machine_with_several_problems_reports_all_at_once() -> None:
    path = MACHINES / "many_problems.yaml"
    found = problems(load_machine, path)
    assert [int(p.split(":")[1]) for p in found] == [2, 4, 7, 9, 10]
    located(found, path, 7, "both final and nesting a machine")


# --------------------------------------------------------------------------- graphs


def test_unknown_machine_lists_known_and_suggests() -> None:
    path = GRAPHS / "unknown_machine.yaml"
    message = located(problems(load_graph, path), path, 3, "unknown machine 'taks'")
    assert "(machines: " in message
    assert "task" in message
    assert message.endswith("did you mean 'task'?")


def test_unknown_needs_suggests() -> None:
    path = GRAPHS / "unknown_needs.yaml"
    located(problems(load_graph, path), path, 7, "unknown node 'fecth'", "'fetch'?")


def test_duplicate_node_ids() -> None:
    path = GRAPHS / "duplicate_ids.yaml"
    located(problems(load_graph, path), path, 5, "duplicate node id 'fetch'")


def test_dependency_cycle_prints_the_chain_at_its_first_node() -> None:
    path = GRAPHS / "cycle.yaml"
    [problem] = problems(load_graph, path)
    # Node `a` is declared on line 5; the chain starts there.
    assert problem.startswith(f"{path}:5:5: dependency cycle: a -> b -> c -> a")


def test_self_dependency_is_a_cycle(tmp_path: Path) -> None:
    text = "nodes:\n  - {id: solo, machine: task, needs: [solo], bind: {run: {python: 'm:f'}}}\n"
    path = write(tmp_path, "g.yaml", text)
    located(problems(load_graph, path), path, 2, "solo -> solo")


def test_hook_left_unbound_names_node_hook_and_states() -> None:
    path = GRAPHS / "unbound_hook.yaml"
    located(problems(load_graph, path), path, 5, "'make'", "hook 'review'", "'build/review'")


def test_binding_for_a_hook_the_machine_lacks() -> None:
    path = GRAPHS / "unknown_hook.yaml"
    located(problems(load_graph, path), path, 6, "hook 'rnu'", "(hooks: run)", "'run'?")


def test_unknown_action_kind() -> None:
    path = GRAPHS / "unknown_action_kind.yaml"
    located(problems(load_graph, path), path, 5, "unknown action kind 'grpc'", "python, shell")


def test_action_with_two_kinds(tmp_path: Path) -> None:
    text = (
        "nodes:\n  - id: a\n    machine: task\n    bind:\n      run: {python: 'm:f', shell: ls}\n"
    )
    path = write(tmp_path, "g.yaml", text)
    located(problems(load_graph, path), path, 5, "exactly one kind", "python, shell")


def test_declared_trigger_the_state_does_not_accept() -> None:
    path = GRAPHS / "bad_trigger.yaml"
    found = problems(load_graph, path)
    located(found, path, 5, "trigger 'retry'", "state 'run'", "accepts: fail, ok")
    located(found, path, 11, "trigger 'skipped'", "accepts: fail, ok")
    assert len(found) == 2


def test_missing_machine_file_is_located_in_the_graph() -> None:
    path = GRAPHS / "missing_machine_file.yaml"
    located(problems(load_graph, path), path, 3, "'../machines/nowhere.yaml' not found")


def test_problems_of_used_machines_are_reported() -> None:
    found = problems(load_graph, GRAPHS / "broken_machine.yaml")
    located(found, MACHINES / "final_hooked.yaml", 5, "both final and hooked")


def test_unordered_nodes_writing_the_same_key() -> None:
    path = GRAPHS / "writes_conflict.yaml"
    [problem] = problems(load_graph, path)
    # `log` has a reducer, `after` runs after both: only `result` of left/right clashes.
    assert problem.startswith(f"{path}:9:5: nodes 'left' and 'right' may run at the same time")
    assert "'result'" in problem
    assert "'log'" not in problem


@pytest.mark.parametrize(
    "action", ['{shell: "true", capture: reply}', '{http: {url: "http://h/x"}, capture: reply}']
)
def test_a_capture_key_outside_the_declared_writes(action: str) -> None:
    """The run would refuse the write after the action ran: the loader refuses it first."""
    text = (
        f"nodes:\n  - id: a\n    machine: task\n    writes: [other]\n    bind: {{run: {action}}}\n"
    )
    with pytest.raises(SpecError) as info:
        load_graph_text(text, name="g")
    [problem] = [str(p) for p in info.value.problems]
    assert problem.startswith("g:5:")
    assert problem.endswith(
        "node 'a': the action bound to hook 'run' captures into 'reply', which is not in the "
        "node's writes (other): add 'reply' to `writes`"
    )
    declared = load_graph_text(text.replace("[other]", "[other, reply]"), name="g")
    assert declared.nodes[0].writes == ("other", "reply")


def test_graph_with_several_problems_reports_all_at_once() -> None:
    path = GRAPHS / "many_problems.yaml"
    found = problems(load_graph, path)
    located(found, path, 2, "concurrency")
    located(found, path, 5, "unknown machine 'taks'")
    located(found, path, 11, "nodes[1].bind.run", "exactly one kind")
    located(found, path, 14, "node 'store' leaves hook 'run' unbound")
    located(found, path, 15, "hook 'check'")
    assert len(found) == 5


# --------------------------------------------------------------------------- valid files


def test_nested_graph_loads_with_every_machine() -> None:
    graph = load_graph(GRAPHS / "nested.yaml")
    assert graph.name == "nested"
    assert sorted(graph.machines) == ["child", "parent", "task"]
    assert graph.machines["parent"].states["build"].machine == "child"
    assert [node.id for node in graph.nodes] == ["make", "report"]
    assert graph.nodes[1].needs == ("make",)
    assert graph.location is not None
    assert graph.location.path == str(GRAPHS / "nested.yaml")
    assert len(graph.digest) == 64
    assert int(graph.digest, 16) >= 0


def test_graph_definition_is_frozen_and_complete() -> None:
    graph = load_graph(str(GRAPHS / "nested.yaml"))
    make = graph.nodes[0]
    assert make.location is not None
    assert make.location.line == 9
    assert isinstance(make.settings, MappingProxyType)
    assert make.settings["paths"] == ["a", "b"]
    review = make.bind["review"]
    assert review.kind == "shell"
    assert review.triggers == ("pass", "fail")
    assert review.config["shell"] == ["true"]
    assert dict(review.config["on_exit"]) == {"0": "pass", "default": "fail"}
    assert make.bind["publish"].triggers == ("ok",)
    assert make.bind["write"].config["python"] == "tests.helpers:write"
    assert graph.nodes[1].bind["run"].config["payload"]["question"] == "ship it?"
    assert [(m.name, dict(m.config)) for m in graph.middleware] == [
        ("timing", {}),
        ("loop_detection", {"window": 5, "threshold": 2}),
    ]
    assert dict(graph.reducers) == {"log": "append"}
    assert graph.concurrency == 3
    with pytest.raises(TypeError):
        make.settings["retries"] = 3  # type: ignore[index]


def test_machine_conversion_expands_star_and_default_hooks() -> None:
    graph = load_graph(GRAPHS / "nested.yaml")
    parent, child = graph.machines["parent"], graph.machines["child"]
    cancel = next(t for t in parent.transitions if t.trigger == "cancel")
    assert cancel.source == ("build", "publish")  # "*" = every non-final state
    assert child.states["review"].hook == "review"  # a bare state hooks its own name
    assert child.states["accepted"].final is NodeOutcome.SUCCESS
    assert child.states["accepted"].hook is None


def test_digest_changes_with_any_definition_change(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    graph_path = tmp_path / "fixtures" / "graphs" / "nested.yaml"
    child = tmp_path / "fixtures" / "machines" / "child.yaml"
    first = load_graph(graph_path).digest
    assert load_graph(graph_path).digest == first
    child.write_text(child.read_text().replace("two-step", "two step"))
    assert load_graph(graph_path).digest != first


PINNED_MACHINE = """\
machine: step
description: One hooked state, then done or failed.
initial: work
states:
  work: {hook: run}
  done: {final: success}
  failed: {final: failed}
transitions:
  - {trigger: ok, source: work, dest: done}
  - {trigger: fail, source: work, dest: failed}
"""
PINNED_GRAPH = r"""graph: pinned
description: "Every kind of field, and text JSON escapes: \"quotes\", tabs\t, ünïcode"
concurrency: 4
machines: [step.yaml]
input: {type: object, properties: {who: {type: string}}}
reducers: {log: append}
middleware: [timing]
output: [log]
nodes:
  - id: first
    machine: step
    writes: [log]
    with: {retries: 2, paths: [b, a], nested: {z: 1, a: [true, null, 1.5]}}
    bind:
      run: {python: "tests.helpers:write", triggers: [ok, fail], timeout: 5}
  - id: second
    machine: step
    needs: [first]
    writes: [log]
    bind:
      run:
        shell: ["sh", "-c", "echo {who}"]
        on_exit: {0: ok, default: fail}
  - id: third
    machine: step
    needs: [first, second]
    bind:
      run: {human: review, payload: {question: "ship it?"}, triggers: [ok, fail]}
"""


def test_the_digest_of_a_graph_stays_what_it_was(tmp_path: Path) -> None:
    """A run resumes only on the graph it started with: how the digest is made is fixed.

    Pinned to the value it had before the nodes were dumped one at a time; change it only
    with a way for runs started before to resume.
    """
    write(tmp_path, "step.yaml", PINNED_MACHINE)
    graph = load_graph(write(tmp_path, "pinned.yaml", PINNED_GRAPH))
    assert graph.digest == "2211fd58b37d5aabf07f61ece99a48e6280e1128e91c584f72620ccb1d63f56b"


def test_machine_file_nests_its_siblings() -> None:
    parent = load_machine(MACHINES / "parent.yaml")
    assert parent.name == "parent"
    assert parent.states["build"].machine == "child"


def test_anchors_and_aliases(tmp_path: Path) -> None:
    text = """initial: a
states:
  a: &plain {}
  b: *plain
  done: {final: success}
transitions:
  - &go {trigger: go, source: a, dest: b}
  - {trigger: go, source: b, dest: done}
"""
    machine = load_machine(write(tmp_path, "anchored.yaml", text))
    assert machine.name == "anchored"
    assert machine.states["b"].hook == "b"


# --------------------------------------------------------------------------- built-ins


def test_builtin_machines_by_name() -> None:
    assert {"task", "loop"} <= set(builtin_machines())
    task = load_machine("task")
    assert task.location is not None
    assert task.location.path == str(machine_source("task"))
    assert task.initial == "run"
    assert task.states["run"].hook == "run"
    assert task.states["done"].final is NodeOutcome.SUCCESS
    assert task.states["failed"].final is NodeOutcome.FAILED
    assert {(t.trigger, t.dest) for t in task.transitions} == {("ok", "done"), ("fail", "failed")}
    assert task.description


def test_loop_machine_is_budgeted() -> None:
    loop = load_machine("loop")
    assert loop.budgets["steps"].limit == 1000
    assert loop.budgets["steps"].spend_on == ("work",)
    again = [t for t in loop.transitions if t.trigger == "again"]
    assert [(t.dest, t.conditions, t.unless) for t in again] == [
        ("work", ("budget:steps",), ()),
        ("exhausted", (), ("budget:steps",)),
    ]
    assert loop.states["done"].final is NodeOutcome.SUCCESS
    assert loop.states["exhausted"].final is NodeOutcome.FAILED
    assert loop.description


def test_builtin_graphs_by_name() -> None:
    for name in builtin_graphs():
        graph = load_graph(name)
        assert graph.location is not None
        assert graph.location.path == str(graph_source(name))


def test_unknown_builtin_name_lists_the_known_ones() -> None:
    [problem] = problems(load_machine, "tsak")
    assert "unknown built-in machine 'tsak'" in problem
    assert all(name in problem for name in builtin_machines())
    assert problem.endswith("did you mean 'task'?")
    [problem] = problems(load_graph, "no_such_graph")
    assert "unknown built-in graph 'no_such_graph'" in problem
    with pytest.raises(SpecError, match="built-in machines: "):
        machine_source("nope")


def test_builtins_found_through_importlib_resources() -> None:
    from importlib import resources

    assert loader_catalog.builtin_dir("states") == resources.files("phasegraph.states")
    assert machine_source("task") == Path(str(resources.files("phasegraph.states"))) / "task.yaml"


@pytest.mark.parametrize("failure", ["missing", "not_a_path"])
def test_builtins_of_a_source_checkout_need_no_importlib_resources(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    import importlib.resources

    calls: list[str] = []

    def files(package: str) -> object:
        calls.append(package)
        if failure == "missing":
            raise ModuleNotFoundError(package)
        return object()  # e.g. a zip traversable: not a directory we can glob

    monkeypatch.setattr(importlib.resources, "files", files)
    assert machine_source("task") == REPO / "states" / "task.yaml"
    assert "task" in builtin_machines()
    assert load_machine("loop").name == "loop"
    assert calls == []  # the folder beside the package is found first


# --------------------------------------------------------------------------- input schemas


def test_input_schema_problems_are_located_at_the_input_key() -> None:
    path = GRAPHS / "bad_input_schema.yaml"
    found = problems(load_graph, path)
    located(found, path, 3, "input.properties.remote", "a non-local $ref is not accepted")
    located(found, path, 3, "input.properties.missing", "'#/$defs/nowhere' points to nothing")
    located(found, path, 3, "input.$defs.tree.properties.children.items", "recursive $ref")
    assert len(found) == 3


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ("{type: 12}", ("input.type: not a valid JSON Schema",)),
        (
            '{type: object, properties: {a: {type: string, pattern: "("}}}',
            ("input.properties.a.pattern: not a valid JSON Schema", "regex"),
        ),
        ('{$ref: "#"}', ("input: a recursive $ref is not accepted", "('#' contains it)")),
        (
            "{$defs: {a: {$ref: '#/$defs/b'}, b: {allOf: [{$ref: '#/$defs/a'}]}}}",
            (
                "input.$defs.a: a recursive $ref",
                "following '#/$defs/b', then '#/$defs/a' comes back",
            ),
        ),
        ("{properties: {a: {$ref: '#name'}}}", ("input.properties.a: a non-local $ref",)),
        ("{properties: {a: {$dynamicRef: '#x'}}}", ("$dynamicRef is not accepted",)),
        ("{properties: {a: {$id: inner, type: string}}}", ("a nested $id is not accepted",)),
    ],
)
def test_bad_input_schema_is_refused_when_the_graph_loads(
    tmp_path: Path, schema: str, words: tuple[str, ...]
) -> None:
    node = "{id: a, machine: task, bind: {run: {human: r}}}"
    path = write(tmp_path, "g.yaml", f"graph: g\ninput: {schema}\nnodes:\n  - {node}\n")
    located(problems(load_graph, path), path, 2, *words)


def test_references_in_data_keywords_are_data(tmp_path: Path) -> None:
    schema = "{properties: {a: {default: {$ref: 'http://x'}, examples: [{$ref: '#'}]}}}"
    text = f"input: {schema}\nnodes:\n  - {{id: a, machine: task, bind: {{run: {{human: r}}}}}}\n"
    graph = load_graph(write(tmp_path, "g.yaml", text))
    assert graph.input_schema is not None
    assert graph.input_schema["properties"]["a"]["default"] == {"$ref": "http://x"}


async def test_local_input_references_are_followed_when_a_run_starts() -> None:
    definition = load_graph(GRAPHS / "local_input_refs.yaml")
    async with MemoryStore() as store:
        engine = Engine(store)
        with pytest.raises(InputError, match=r"input\.team\.0: '' should be non-empty"):
            await engine.run(definition, {"who": "ada", "team": [""]})
        state = await engine.run(definition, {"who": "ada", "team": ["bob"]})
    assert state.status is RunStatus.WAITING
    (interrupt,) = state.interrupts.values()
    assert interrupt.payload == {"who": "ada"}


def test_cli_reports_a_bad_input_schema_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    path = GRAPHS / "bad_input_schema.yaml"
    assert main(["run", str(path), "--store", "memory://"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:1: input.properties.remote: a non-local $ref is not accepted" in err
    assert "Traceback" not in err
    assert "jsonschema" not in err


# --------------------------------------------------------------------------- YAML limits


def _nested(levels: int) -> str:
    """A graph whose `with:` setting nests collections ``levels`` deep in all."""
    inner = "[" * (levels - 4) + "]" * (levels - 4)  # root, nodes, node, with: 4 levels
    return f"nodes:\n  - id: a\n    machine: task\n    with: {{deep: {inner}}}\n" + (
        # A function of the user's own may read any setting, however deep.
        '    bind: {run: {python: "pkg.mod:work"}}\n'
    )


def _laughs(levels: int = 9, width: int = 10) -> str:
    """Anchors that each repeat the previous one ``width`` times: width**levels values."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\nnodes: []\n"


def _alias_chain(links: int) -> str:
    """Each anchor nests the previous alias three levels deeper."""
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [[[*a{i - 1}]]]" for i in range(1, links + 1)]
    return "\n".join(lines) + "\nnodes: []\n"


LIMITS = [
    pytest.param("nodes: " + "[" * 10_000 + "]" * 10_000 + "\n", 1, "deeper than 64", id="flow"),
    pytest.param(
        "".join("  " * i + f"k{i}:\n" for i in range(500)) + "  " * 500 + "v: 1\n",
        65,
        "deeper than 64",
        id="block",
    ),
    pytest.param(_nested(65), 4, "nest deeper than 64 levels", id="settings"),
    # Reported at the first alias whose value alone is past the limit (a6 repeats a5).
    pytest.param(_laughs(), 7, "expand this file to more than 200000 values", id="laughs"),
    pytest.param("a: &a [1, *a]\nnodes: []\n", 1, "*a is inside the collection", id="self"),
    pytest.param(
        "x: &x 1\nmany: [" + ", ".join(["*x"] * 300) + "]\n", 2, "more than 256", id="count"
    ),
    # Reported at the alias of the deepest value.
    pytest.param(_alias_chain(30), 31, "aliases nest this file deeper than 64", id="chain"),
]


@pytest.mark.parametrize(("text", "line", "words"), LIMITS)
def test_yaml_past_the_limits_is_one_located_problem(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, "big.yaml", text)
    # The CPU this process spends, which other processes cannot stretch as they do the
    # wall clock: walking an expansion would take hours of it.
    started = time.process_time()
    for load in (load_graph, load_machine):
        [problem] = problems(load, path)
        assert problem.startswith(f"{path}:{line}:"), problem
        assert words in problem
    assert time.process_time() - started < 5  # refused before anything walks the expansion


def test_nesting_up_to_the_limit_loads(tmp_path: Path) -> None:
    graph = load_graph(write(tmp_path, "deep.yaml", _nested(64)))
    deep: Any = graph.nodes[0].settings["deep"]
    levels = 0
    while isinstance(deep, list):
        deep, levels = (deep[0] if deep else None), levels + 1
    assert levels == 60


ALIASED = """
nodes:
  - {id: a, machine: task, with: &big {x: [&row [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]},
     bind: {run: &work {python: "pkg.mod:work", triggers: [ok]}}}
  - {id: b, machine: task, with: {<<: *big, y: [*row, *row, *row]}, bind: {run: *work}}
"""


def test_aliases_within_the_limits_load(tmp_path: Path) -> None:
    graph = load_graph(write(tmp_path, "shared.yaml", ALIASED))
    assert [node.id for node in graph.nodes] == ["a", "b"]
    assert graph.nodes[1].bind["run"].config["python"] == "pkg.mod:work"
    assert graph.nodes[1].settings["x"] == graph.nodes[0].settings["x"]
    assert len(graph.nodes[1].settings["y"]) == 3


# --------------------------------------------------------------------------- graphs as text


def test_load_graph_text_matches_loading_the_file() -> None:
    path = GRAPHS / "local_input_refs.yaml"
    text = path.read_text(encoding="utf-8")
    from_text = load_graph_text(text, name="pasted")
    from_file = load_graph(path)
    assert from_text.digest == from_file.digest
    assert from_text.name == "local_input_refs"
    assert from_text.location == SourceLocation("pasted")
    assert from_text.nodes[0].location == SourceLocation("pasted", 14, 5)
    unnamed = load_graph_text(text.replace("graph: local_input_refs\n", ""), name="pasted")
    assert unnamed.name == "pasted"


def test_load_graph_text_locates_problems_in_its_name() -> None:
    text = "machines: [../machines/parent.yaml]\nnodes:\n  - {id: a, machine: parent}\n"
    with pytest.raises(SpecError) as info:
        load_graph_text(text, name="request.graph")
    found = [str(problem) for problem in info.value.problems]
    assert found[0].startswith("request.graph:1:1: a graph given as text may use built-in")
    assert found[1].startswith("request.graph:3:13: node 'a' uses unknown machine 'parent'")
    assert len(found) == 2


def test_load_graph_text_takes_limits() -> None:
    text = ALIASED.replace("nodes:", "graph: shared\nnodes:")
    assert [node.id for node in load_graph_text(text, name="t").nodes] == ["a", "b"]
    with pytest.raises(SpecError) as info:
        load_graph_text(text, name="t", limits=YamlLimits(max_aliases=0))
    [problem] = [str(p) for p in info.value.problems]
    assert problem.startswith("t:6:39: YAML aliases (*name) are not accepted here")
    with pytest.raises(SpecError, match="t:4:34: YAML collections nest deeper than 3"):
        load_graph_text(text, name="t", limits=YamlLimits(max_depth=3))
