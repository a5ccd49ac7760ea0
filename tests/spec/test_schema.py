"""Tests for the YAML formats: the checked-in JSON Schemas, the models, every shipped file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from builders import REPO
from phasegraph.actions._human import build_gate
from phasegraph.api import Engine
from phasegraph.cli import main
from phasegraph.model import NodeOutcome, RunStatus
from phasegraph.spec import _schema as schema
from phasegraph.spec import load_graph, load_machine
from phasegraph.store import open_store

SPECS = REPO / "specs"
REGENERATE = "PHASEGRAPH_REGEN_SPECS=1 pytest tests/spec/test_schema.py"
SHIPPED = [
    *(("machine", path) for path in sorted((REPO / "states").glob("*.yaml"))),
    *(("graph", path) for path in sorted((REPO / "graphs").glob("*.yaml"))),
]


def regenerate_if_asked(directory: Path) -> bool:
    """Rewrite the specs when PHASEGRAPH_REGEN_SPECS is set (never under CI)."""
    if not os.environ.get("PHASEGRAPH_REGEN_SPECS"):
        return False
    if os.environ.get("CI"):
        pytest.fail("PHASEGRAPH_REGEN_SPECS is refused when CI is set: regenerate locally")
    schema.write_specs(directory)
    return True


def test_checked_in_specs_match_the_models(tmp_path: Path) -> None:
    regenerate_if_asked(SPECS)
    for fresh in schema.write_specs(tmp_path):
        checked_in = SPECS / fresh.name
        current = checked_in.read_text(encoding="utf-8") if checked_in.exists() else ""
        assert current == fresh.read_text(encoding="utf-8"), (
            f"specs/{fresh.name} is out of date with the format models: run `{REGENERATE}`"
        )


def test_regeneration_is_refused_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHASEGRAPH_REGEN_SPECS", "1")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="refused when CI is set"):
        regenerate_if_asked(tmp_path)
    assert not list(tmp_path.iterdir())
    monkeypatch.delenv("CI")
    assert regenerate_if_asked(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "graph.schema.json",
        "machine.schema.json",
    ]


def test_write_specs_is_deterministic(tmp_path: Path) -> None:
    first = [p.read_bytes() for p in schema.write_specs(tmp_path / "a")]
    second = [p.read_bytes() for p in schema.write_specs(tmp_path / "b")]
    assert first == second
    text = first[0].decode()
    assert text.endswith("}\n")
    assert text.startswith('{\n  "$defs"')
    assert json.loads(text) == schema.machine_json_schema()


def _objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append(node)
        for value in node.values():
            found.extend(_objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_objects(value))
    return found


@pytest.mark.parametrize("generate", [schema.machine_json_schema, schema.graph_json_schema])
def test_json_schema_is_closed_and_documented(generate: Any) -> None:
    document = generate()
    assert document["$schema"].endswith("2020-12/schema")
    models = [obj for obj in _objects(document) if "properties" in obj]
    keyed = [obj for obj in _objects(document) if "patternProperties" in obj]
    assert len(models) >= 3
    assert keyed
    for obj in models + keyed:
        assert obj["additionalProperties"] is False, obj.get("title")
    for obj in models:
        for name, prop in obj["properties"].items():
            assert prop.get("description"), f"{obj.get('title')}.{name} has no description"


def test_json_schema_states_the_rules() -> None:
    machine = schema.machine_json_schema()
    state = machine["$defs"]["StateSpec"]
    assert state["properties"]["final"]["anyOf"][0]["enum"] == [o.value for o in NodeOutcome]
    assert list(machine["properties"]["states"]["patternProperties"]) == [schema.NAME_PATTERN]
    assert {"required": ["final", "hook"]} in state["not"]["anyOf"]
    predicate = machine["$defs"]["TransitionSpec"]["properties"]["conditions"]["items"]
    assert predicate["pattern"] == schema.PREDICATE_PATTERN
    graph = schema.graph_json_schema()
    assert graph["$defs"]["NodeSpec"]["properties"]["id"]["pattern"] == schema.ID_PATTERN
    bind = graph["$defs"]["NodeSpec"]["properties"]["bind"]["patternProperties"]
    kinds = [ref["$ref"].rsplit("/", 1)[1] for ref in bind[schema.NAME_PATTERN]["oneOf"]]
    assert kinds == [
        "PythonAction",
        "ShellAction",
        "HttpAction",
        "HumanAction",
        "LlmAction",
        "ToolsAction",
        "PlanAction",
        "GraphAction",
    ]
    for name, kind in zip(kinds, schema.ACTION_KINDS, strict=True):
        assert graph["$defs"][name]["required"][0] == kind


@pytest.mark.parametrize(("kind", "path"), SHIPPED, ids=[p.name for _, p in SHIPPED])
def test_shipped_files_validate_and_load(kind: str, path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    wanted = schema.machine_json_schema if kind == "machine" else schema.graph_json_schema
    jsonschema.validate(json.loads(json.dumps(document)), wanted())
    check = schema.check_machine if kind == "machine" else schema.check_graph
    checked = check(document)
    assert checked.issues == ()
    assert checked.spec is not None
    loaded = load_machine(path) if kind == "machine" else load_graph(path)
    assert loaded.location is not None
    assert loaded.location.path == str(path)


def test_shipped_machines_include_task_and_loop() -> None:
    assert {path.stem for kind, path in SHIPPED if kind == "machine"} >= {"task", "loop"}


PREDICATES_OK = ["budget:steps", "payload:ok", "setting:review.timeout", "setting:_x.y_1"]
PREDICATES_BAD = ["budget:", "budgets:x", "setting:1x", "budget:a b", "payload", "env:HOME"]


@pytest.mark.parametrize("predicate", PREDICATES_OK + PREDICATES_BAD)
def test_predicate_syntax(predicate: str) -> None:
    document = {
        "initial": "a",
        "budgets": {"steps": {"limit": 1, "spend_on": ["a"]}},
        "states": {"a": {}, "b": {"final": "success"}},
        "transitions": [{"trigger": "go", "source": "a", "dest": "b", "unless": [predicate]}],
    }
    issues = schema.check_machine(document).issues
    if predicate in PREDICATES_OK:
        assert issues == ()
    else:
        [issue] = issues
        assert issue.loc == ("transitions", 0, "unless", 0)
        assert "budget:NAME, payload:KEY or setting:DOTTED.KEY" in issue.message


@pytest.mark.parametrize(
    ("retry", "wrong"),
    [
        ({"hook": "work", "retries": "main"}, None),
        ({"hook": "work", "retries": "mian"}, "retries names unknown state 'mian'"),
        ({"hook": "other", "retries": "main"}, "both need the same hook"),
        ({"hook": "work", "retries": "retry"}, "the call of another state"),
        ({"machine": "task", "retries": "main"}, "both need the same hook"),
    ],
)
def test_a_retry_names_another_state_of_its_hook(retry: dict[str, str], wrong: str | None) -> None:
    document = {
        "initial": "main",
        "states": {"main": {"hook": "work"}, "retry": retry, "done": {"final": "success"}},
        "transitions": [{"trigger": "ok", "source": ["main", "retry"], "dest": "done"}],
    }
    issues = schema.check_machine(document).issues
    if wrong is None:
        assert issues == ()
    else:
        [issue] = issues
        assert issue.loc == ("states", "retry", "retries")
        assert wrong in issue.message


@given(st.text(alphabet="ab_9./-Z ", min_size=1, max_size=6))
def test_state_names_follow_the_pattern(name: str) -> None:
    checked = schema.check_machine({"initial": "a", "states": {"a": {}, name: {"final": "failed"}}})
    valid = re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) is not None
    assert (checked.issues == ()) == valid
    if {"/", "."} & set(name):
        assert any("'/' and '.' are reserved" in issue.message for issue in checked.issues)


def _action(action: dict[str, Any]) -> schema.Checked[schema.GraphSpec]:
    return schema.check_graph({"nodes": [{"id": "n", "machine": "task", "bind": {"run": action}}]})


@pytest.mark.parametrize(
    ("action", "kind", "triggers"),
    [
        ({"python": "pkg.mod:func"}, "python", ()),
        ({"python": "pkg.mod:func", "triggers": ["ok", "ok", "fail"]}, "python", ("ok", "fail")),
        ({"shell": "make check"}, "shell", ("ok", "fail")),
        (
            {"shell": ["x"], "on_exit": {0: "ok", 3: "retry"}, "timeout_trigger": "late"},
            "shell",
            ("ok", "retry", "late", "fail"),  # any other status falls back to fail
        ),
        (
            {"shell": ["x"], "on_exit": {0: "ok", "default": "retry"}},
            "shell",
            ("ok", "retry"),
        ),
        ({"http": {"url": "http://h/x", "method": "POST"}}, "http", ("ok", "fail")),
        ({"http": {"url": "http://h/x"}, "on_status": {404: "missing"}}, "http", ("missing",)),
        (
            {
                "http": {"url": "https://h/{id}"},
                "on_status": {"2xx": "ok", 404: "gone", "5xx": "x"},
            },
            "http",
            ("ok", "gone", "x"),
        ),
        (
            {"human": "review", "triggers": ["confirm", "reject", "timeout"]},
            "human",
            ("confirm", "reject", "timeout"),
        ),
    ],
)
def test_each_action_kind(action: dict[str, Any], kind: str, triggers: tuple[str, ...]) -> None:
    checked = _action(action)
    assert checked.issues == ()
    assert checked.spec is not None
    bound = checked.spec.nodes[0].bind["run"]
    assert bound.kind == kind
    assert bound.declared_triggers() == triggers


def test_human_actions_may_park() -> None:
    checked = _action({"human": "review", "park": True, "triggers": ["confirm"]})
    assert checked.issues == ()
    assert checked.spec is not None
    assert isinstance(checked.spec.nodes[0].bind["run"], schema.HumanAction)
    assert checked.spec.nodes[0].bind["run"].park is True
    unparked = _action({"human": "review"}).spec
    assert unparked is not None
    assert unparked.nodes[0].bind["run"].model_dump()["park"] is False
    [issue] = _action({"human": "review", "park": "soon"}).issues
    assert issue.loc == ("nodes", 0, "bind", "run", "park")
    [issue] = _action({"python": "m:f", "park": True}).issues  # only human gates park
    assert "unknown key 'park'" in issue.message
    park = schema.graph_json_schema()["$defs"]["HumanAction"]["properties"]["park"]
    assert (park["type"], park["default"]) == ("boolean", False)


def test_coding_task_parks_its_review_after_a_timeout() -> None:
    spec = next(node for node in load_graph("coding_task").nodes if node.id == "spec")
    assert build_gate(spec.bind["spec_review_parked"]).park is True
    assert build_gate(spec.bind["spec_review"]).park is False


def test_a_coding_task_review_timeout_parks_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped gate with a deadline short enough to pass: `resume` parks the run."""
    shipped = (REPO / "graphs" / "coding_task.yaml").read_text(encoding="utf-8")
    assert "timeout: 1800" in shipped
    graph = tmp_path / "coding_review.yaml"
    graph.write_text(shipped.replace("timeout: 1800", "timeout: 0.001"), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    common = ["-q", "--store", store]
    assert main(["run", str(graph), *common, "--input", f"workdir={tmp_path}"]) == 3
    run_id = capsys.readouterr().out.split()[1]
    time.sleep(0.01)  # past the review's deadline
    assert main(["resume", run_id, *common]) == 3
    assert f"run {run_id} parked" in capsys.readouterr().out

    async def head():
        async with open_store(store) as opened:
            return await Engine(opened).get(run_id)

    state = asyncio.run(head())
    assert state.status is RunStatus.PARKED
    assert state.nodes["spec"].path == ("parked",)
    (interrupt,) = state.interrupts.values()
    assert interrupt.id == f"{run_id}:spec:spec_review"  # the review's id, kept when parked
    assert interrupt.parked is True


@pytest.mark.parametrize(
    ("request_", "where", "expected"),
    [
        (
            {"url": "ftp://h/x"},
            ("url",),
            "'ftp://h/x' is not a valid URL: write an absolute URL starting with http:// or "
            "https:// and its host",
        ),
        (
            {"url": "{base}/x"},
            ("url",),
            "'{base}/x' is not a valid URL",
        ),
        (
            {"url": "http://h/{id"},
            ("url",),
            "'http://h/{id' is not a valid template: expected '}' before end of string "
            "(write {{ or }} for a literal brace)",
        ),
        (
            {"url": "http://h/x", "headers": {"X-Id": "{0}"}},
            ("headers", "X-Id"),
            "'{0}' is not a valid template: {0} is a positional placeholder: name the value, "
            "e.g. {id} (write {{ or }} for a literal brace)",
        ),
        (
            {"url": "http://h/x", "headers_from_env": {"Bad Name": "{TOKEN}"}},
            ("headers_from_env", "Bad Name"),
            "'Bad Name' is not a valid header name",
        ),
        (
            {
                "url": "http://h/x",
                "headers": {"authorization": "x"},
                "headers_from_env": {"Authorization": "Bearer {TOKEN}"},
            },
            (),
            "header 'Authorization' is in both headers and headers_from_env: keep one",
        ),
    ],
)
def test_http_requests_are_checked_before_any_run(
    request_: dict[str, Any], where: tuple[str, ...], expected: str
) -> None:
    [issue] = _action({"http": request_}).issues
    assert issue.loc == ("nodes", 0, "bind", "run", "http", *where)
    assert expected in issue.message


def test_http_status_keys_and_the_default_timeout() -> None:
    [issue] = _action({"http": {"url": "http://h/x"}, "on_status": {"2xy": "ok"}}).issues
    assert "'2xy' is not a valid status key: write a status code (404), a class (4xx)" in (
        issue.message
    )
    spec = _action({"http": {"url": "http://h/x"}}).spec
    assert spec is not None
    dumped = spec.nodes[0].bind["run"].model_dump()
    assert (dumped["timeout"], dumped["on_status"]) == (30.0, {"2xx": "ok", "default": "fail"})


def test_shell_exit_keys_become_strings() -> None:
    checked = _action({"shell": "true", "on_exit": {0: "ok", "default": "fail"}})
    assert checked.spec is not None
    assert checked.spec.nodes[0].bind["run"].model_dump()["on_exit"] == {
        "0": "ok",
        "default": "fail",
    }


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (
            {"triggers": ["ok"]},
            "the action has no kind: add one of python, shell, http, human, llm, tools, plan, "
            "graph",
        ),
        (
            {"pyhton": "m:f"},
            "unknown action kind 'pyhton': use one of python, shell, http, "
            "human, llm, tools, plan, graph; did you mean 'python'?",
        ),
        ({"python": "m:f", "human": "x"}, "exactly one kind, this one has python, human"),
        ("m:f", "an action is a mapping with exactly one kind key"),
    ],
)
def test_exactly_one_kind(action: Any, expected: str) -> None:
    [issue] = _action(action).issues
    assert issue.loc == ("nodes", 0, "bind", "run")
    assert expected in issue.message


def test_options_of_another_kind_are_unknown_keys() -> None:
    [issue] = _action({"python": "m:f", "on_exit": {0: "ok"}}).issues
    assert issue.loc == ("nodes", 0, "bind", "run", "on_exit")
    assert "unknown key 'on_exit'" in issue.message
    allowed = issue.message.split("allowed: ")[1].split(", ")
    assert {"timeout", "python", "effect", "on_unknown"} <= set(allowed)
    assert "on_exit" not in allowed


def test_salvaged_lists_keep_document_positions() -> None:
    document = {
        "nodes": [
            {"id": "bad", "machine": "task", "needs": "not-a-list"},
            {"id": "good", "machine": "task", "needs": ["nope"]},
        ]
    }
    checked = schema.check_graph(document)
    assert [issue.loc for issue in checked.issues] == [
        ("nodes", 0, "needs"),
        ("nodes", 1, "needs", 0),
    ]
    assert checked.spec is not None
    assert [n.id for n in checked.spec.nodes] == ["good"]
    assert checked.locate(("nodes", 0, "bind")) == ("nodes", 1, "bind")


def test_yaml_booleans_get_a_hint() -> None:
    [issue] = _action({"python": "m:f", "triggers": [True]}).issues
    assert "quote it" in issue.message


def test_did_you_mean() -> None:
    assert schema.did_you_mean("tsak", ["task", "loop"]) == "; did you mean 'task'?"
    assert schema.did_you_mean("zzz", ["task", "loop"]) == ""


FIXTURES = [
    *(("machine", p) for p in sorted((REPO / "tests/fixtures/machines").glob("*.yaml"))),
    *(("graph", p) for p in sorted((REPO / "tests/fixtures/graphs").glob("*.yaml"))),
]


@pytest.mark.parametrize(("kind", "path"), FIXTURES, ids=[p.name for _, p in FIXTURES])
def test_json_schema_agrees_with_the_models(kind: str, path: Path) -> None:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return  # not YAML at all: neither validator gets a document
    wanted = schema.machine_json_schema() if kind == "machine" else schema.graph_json_schema()
    json_ok = not list(
        jsonschema.Draft202012Validator(wanted).iter_errors(json.loads(json.dumps(document)))
    )
    model = schema.MachineSpec if kind == "machine" else schema.GraphSpec
    assert json_ok == (isinstance(document, dict) and _structurally_valid(model, document))


def _structurally_valid(model: Any, document: dict[str, Any]) -> bool:
    try:
        model.model_validate(document)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return False
    return True
