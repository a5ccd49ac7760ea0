"""Uploaded graphs and request limits: what the server refuses, and how it says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_server import FIXTURES, GATED, serving, settings_for

from phasegraph import Engine
from phasegraph.errors import SpecError
from phasegraph.server._upload import UPLOAD_FIELD, UploadPolicy, load_upload
from phasegraph.spec import YamlLimits, load_graph_text
from phasegraph.store.memory import MemoryStore

SHELL = """
graph: shelly
nodes:
  - id: x
    machine: task
    bind:
      run: {shell: ["true"]}
"""


async def test_body_over_the_limit_is_413(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_body_bytes=2048)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        response = await client.post("/runs", json={"graph": "hello", "input": {"x": "y" * 4096}})
        assert response.status == 413
        assert response.content_type == "application/problem+json"
        assert (await response.json())["status"] == 413
        assert (await client.get("/runs")).status == 200  # the server is fine afterwards


async def test_python_module_not_allowed_is_400_naming_node_and_module(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, allow_python_modules=frozenset({"phasegraph.concerns.spec"}))
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        response = await client.post("/runs", json={"graph_yaml": GATED, "input": {"topic": "t"}})
        assert response.status == 400
        body = await response.json()
        assert body["code"] == "spec_invalid"
        messages = [p["message"] for p in body["problems"]]
        assert any("node 'spec', hook 'plan'" in m and "'gate_actions'" in m for m in messages)
        assert any("node 'build', hook 'run'" in m for m in messages)
        assert all(p["location"].startswith("graph_yaml:") for p in body["problems"])
        assert "--allow-python gate_actions" in messages[0]
        assert (await client.get("/runs")).status == 200
        assert (await (await client.get("/runs")).json())["runs"] == []  # nothing created
    assert not list((tmp_path / "uploads").glob("*.yaml"))  # the refused file is not kept


async def test_shell_actions_need_allow_shell(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        refused = await client.post("/runs", json={"graph_yaml": SHELL})
        assert refused.status == 400
        assert "--allow-shell" in (await refused.json())["detail"]
    settings = settings_for(tmp_path, allow_shell=True)
    async with MemoryStore() as store, serving(Engine(store), settings) as client:
        accepted = await client.post("/runs", json={"graph_yaml": SHELL})
        assert accepted.status == 201, await accepted.text()


async def test_invalid_upload_is_400_with_positions_in_the_field(tmp_path: Path) -> None:
    broken = GATED.replace("machine: task", "machine: tsak").replace("needs: [spec]", "needs: [x]")
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        response = await client.post("/runs", json={"graph_yaml": broken, "input": {}})
        assert response.status == 400
        body = await response.json()
        locations = [p["location"] for p in body["problems"]]
        assert all(loc.startswith("graph_yaml:") for loc in locations)
        assert any("'tsak'" in p["message"] for p in body["problems"])
        assert str(tmp_path) not in await response.text()  # no server path leaks out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nodes:\n  - &n {id: a, machine: task}\n  - *n\n", "aliases"),
        ("nodes: " + "[" * 40 + "]" * 40 + "\n", "deeper than 32"),
        ("machines: [/etc/passwd]\nnodes: []\n", "built-in machines only"),
        ("nodes:\n  - {id: a, machine: task, bind: {run: {shell: x}}}\n" + "#" * 300_000, "bytes"),
    ],
)
def test_upload_shape_limits(tmp_path: Path, text: str, expected: str) -> None:
    policy = UploadPolicy(upload_dir=tmp_path, max_depth=32)
    with pytest.raises(SpecError, match=expected):
        load_upload(text, policy)
    assert not list(tmp_path.glob("*.yaml"))


def test_shape_scan_ignores_text_that_only_looks_like_yaml() -> None:
    text = (
        "description: |\n"
        "  *not an alias [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
        "  - *still text\n"
        "quoted: 'it''s *fine [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[['\n"
        'double: "a \\" *b [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["\n'
        "plain: a*b # *comment [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
    )
    assert _limit_problems(text) == []
    assert len(_limit_problems("a: [*x, *y]\nb: *z\n")) == 2  # one per line


def _limit_problems(text: str) -> list[str]:
    """The alias and nesting problems an upload's text meets (as the server loads it)."""
    with pytest.raises(SpecError) as caught:
        load_graph_text(text, name=UPLOAD_FIELD, limits=YamlLimits(max_depth=8, max_aliases=0))
    messages = [str(problem) for problem in caught.value.problems]
    return [m for m in messages if "alias" in m or "nest" in m]


def test_accepted_upload_is_kept_under_its_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    policy = UploadPolicy(
        upload_dir=tmp_path,
        allow_python_modules=frozenset({"gate_actions", "phasegraph.concerns.spec"}),
    )
    first = load_upload(GATED, policy)
    second = load_upload(GATED, policy)
    assert first.location == second.location
    (kept,) = tmp_path.glob("upload-*.yaml")
    assert kept.read_text(encoding="utf-8") == GATED
    assert first.name == "gated"


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ('{$ref: "#"}', "$ref is not accepted"),
        ("{type: object, properties: {a: {$ref: 'http://example.com/s'}}}", "$ref is not accepted"),
        ('{type: object, properties: {a: {type: string, pattern: "("}}}', "not a valid JSON"),
        ("{type: 12}", "not a valid JSON Schema"),
    ],
)
async def test_upload_input_schema_must_be_valid_and_self_contained(
    tmp_path: Path, schema: str, expected: str
) -> None:
    graph = f"""
graph: schema_check
input: {schema}
nodes:
  - id: x
    machine: task
    bind: {{run: {{human: review, triggers: [ok]}}}}
"""
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        response = await client.post("/runs", json={"graph_yaml": graph, "input": {"a": "b"}})
        assert response.status == 400, await response.text()
        assert expected in (await response.json())["detail"]


LONG = "more than 4300 digits"  # Python converts integers of at most 4300 digits from text


async def test_an_integer_too_long_to_read_is_400_at_its_place(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        graph = "graph: big\ndescription: " + "1" * 5000 + "\nnodes: []\n"
        response = await client.post("/runs", json={"graph_yaml": graph})
        assert response.status == 400
        body = await response.json()
        assert body["code"] == "spec_invalid"
        (problem,) = body["problems"]
        assert problem["location"] == "graph_yaml:2:14"
        assert LONG in problem["message"]
        assert (await (await client.get("/runs")).json())["runs"] == []


async def test_a_json_number_too_long_to_read_is_400_saying_so(tmp_path: Path) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        raw = b'{"graph": "hello", "input": {"who": ' + b"9" * 5000 + b"}}"
        response = await client.post(
            "/runs", data=raw, headers={"Content-Type": "application/json"}
        )
        assert response.status == 400
        (problem,) = (await response.json())["problems"]
        assert problem == {
            "field": "body",
            "message": "a number of 5000 digits: phasegraph reads integers of at most 4300 "
            "digits; write it as a string to pass it as text",
        }
