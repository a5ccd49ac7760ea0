"""``specs/openapi.yaml`` against the live server: routes, response schemas, and a fuzz run.

* every registered route is in the document and every documented route is registered;
* responses of the main routes (and their errors) validate against the documented
  schemas, and their statuses are documented;
* a bounded hypothesis fuzz run over every documented operation (a few hundred requests
  with half-valid and garbage bodies, parameters and run ids) gets no 5xx and only
  documented, schema-valid answers. (schemathesis installs from PyPI, but its pytest
  plugin, loaded by every test run once installed, changes hypothesis' failure reports
  and breaks tests of ``phasegraph.testing._contract``; this small fuzzer stands in for it
  here, and ``.ci/fuzz`` runs schemathesis itself, in its own virtualenv, against a live
  ``phasegraph serve``.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest
import yaml
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_server import FIXTURES, GATED, serving, settings_for, sse, wait_for

from builders import REPO
from phasegraph import Engine
from phasegraph.server import create_app
from phasegraph.server._support import ENGINE
from phasegraph.store.memory import MemoryStore

SPEC: dict[str, Any] = yaml.safe_load((REPO / "specs" / "openapi.yaml").read_text(encoding="utf-8"))
METHODS = ("get", "post", "put", "patch", "delete")
PROBLEM = {"$ref": "#/components/schemas/Problem", "components": SPEC["components"]}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node and len(node) == 1:
        *_, kind, name = node["$ref"].split("/")
        node = SPEC["components"][kind][name]
    return node


def check(response: ClientResponse, body: Any, template: str, method: str) -> None:
    """Assert the response's status is documented and its body matches the schema."""
    documented = SPEC["paths"][template][method]["responses"]
    status = str(response.status)
    assert status in documented, f"{method.upper()} {template} answered {status}: undocumented"
    content = _resolve(documented[status]).get("content", {})
    media = response.content_type
    assert media in content, f"{method.upper()} {template} {status}: {media} undocumented"
    schema = {**content[media]["schema"], "components": SPEC["components"]}
    if "json" in media:  # streams, pages and scripts: the status and type are what we check
        jsonschema.Draft202012Validator(schema).validate(body)


async def call(client: TestClient, method: str, template: str, path: str, **kw: Any) -> Any:
    async with client.request(method, path, **kw) as response:
        body = await response.json() if "json" in response.content_type else None
        check(response, body, template, method.lower())
        return response.status, body


def test_every_route_is_documented_and_every_documented_route_exists(tmp_path: Path) -> None:
    app = create_app(Engine(MemoryStore()), settings=settings_for(tmp_path))
    registered = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()}
    documented = {
        (method, path)
        for path, item in SPEC["paths"].items()
        for method in item
        if method in METHODS
    }
    assert registered == documented
    jsonschema.Draft202012Validator.check_schema({"components": SPEC["components"]})


@pytest.fixture
async def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TestClient]:
    monkeypatch.syspath_prepend(str(FIXTURES))
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as served:
        yield served


async def test_main_routes_answer_what_the_spec_says(client: TestClient) -> None:
    status, run = await call(client, "POST", "/runs", "/runs", json={"graph": "hello"})
    assert status == 201
    done = await wait_for(client, run["run_id"], lambda v: v["status"] == "completed")
    run_id = done["run_id"]
    body = {"graph_yaml": GATED, "input": {"topic": "specs"}}
    gated = (await call(client, "POST", "/runs", "/runs", json=body))[1]["run_id"]
    await wait_for(client, gated, lambda v: v["status"] == "waiting")

    for template, path in [
        ("/healthz", "/healthz"),
        ("/readyz", "/readyz"),
        ("/runs", "/runs?status=completed&limit=1"),
        ("/runs/{run_id}", f"/runs/{run_id}"),
        ("/runs/{run_id}", f"/runs/{gated}"),
        ("/runs/{run_id}/snapshot", f"/runs/{run_id}/snapshot?seq=2"),
        ("/runs/{run_id}/snapshot", f"/runs/{gated}/snapshot"),
        ("/runs/{run_id}/history", f"/runs/{run_id}/history?start=1&limit=3"),
        ("/runs/{run_id}/errors", f"/runs/{run_id}/errors"),
        ("/runs/{run_id}/graph", f"/runs/{gated}/graph"),
        ("/ui", "/ui"),
        ("/ui/{name}", "/ui/app.js"),
        ("/ui/{name}", "/ui/style.css"),
    ]:
        assert (await call(client, "GET", template, path))[0] == 200
    async with client.get(f"/runs/{run_id}/events") as stream:
        check(stream, None, "/runs/{run_id}/events", "get")
        events = await sse(stream)
    event_schema = {"$ref": "#/components/schemas/Event", "components": SPEC["components"]}
    for event in events:
        jsonschema.Draft202012Validator(event_schema).validate(event)

    assert (await call(client, "POST", "/runs/{run_id}/resume", f"/runs/{gated}/resume"))[0] == 202
    reply = {
        "interrupt_id": f"{gated}:spec:spec_review",
        "trigger": "confirm",
        "data": {"spec": "edited"},
    }
    assert (await call(client, "POST", "/runs/{run_id}/reply", f"/runs/{gated}/reply", json=reply))[
        0
    ] == 200
    fork = {"at_seq": 3, "data": {"who": "fork"}}
    status, forked = await call(
        client, "POST", "/runs/{run_id}/fork", f"/runs/{run_id}/fork", json=fork
    )
    assert (status, forked["forked_from"]) == (201, run_id)
    status, report = await call(client, "POST", "/runs/{run_id}/replay", f"/runs/{run_id}/replay")
    assert (status, report["identical"]) == (200, True)
    cancel = await call(client, "POST", "/runs/{run_id}/cancel", f"/runs/{run_id}/cancel")
    assert cancel[0] == 409
    assert cancel[1]["code"] == "run_state"
    assert (await call(client, "GET", "/runs/{run_id}", "/runs/missing"))[0] == 404
    assert (await call(client, "POST", "/runs", "/runs", json={"graph": 1}))[0] == 400


async def test_a_planned_runs_routes_answer_what_the_spec_says(client: TestClient) -> None:
    # From its file (an uploaded graph may not plan), into the store the server reads.
    engine = client.server.app[ENGINE]
    run_id = (await engine.run(FIXTURES / "planned.yaml", {})).run_id
    plan = [{"id": "a"}, {"id": "b", "needs": ["a"]}, {"id": "bad", "fail": True}]
    reply = {"interrupt_id": f"{run_id}:phases:plan", "trigger": "planned", "data": {"plan": plan}}
    path = "/runs/{run_id}/reply"
    assert (await call(client, "POST", path, f"/runs/{run_id}/reply", json=reply))[0] == 200

    # The child that failed sends the plan back to its gate: a second version finishes it.
    def replanning(view: dict[str, Any]) -> bool:
        bad = view["nodes"].get("phases.bad", {})
        return view["status"] == "waiting" and bad.get("status") == "failed"

    await wait_for(client, run_id, replanning)
    reply["data"] = {"plan": [{"id": "fix"}]}
    assert (await call(client, "POST", path, f"/runs/{run_id}/reply", json=reply))[0] == 200
    await wait_for(client, run_id, lambda v: v["status"] == "completed")

    _, shape = await call(client, "GET", "/runs/{run_id}/graph", f"/runs/{run_id}/graph")
    assert shape["nodes"]["phases"]["plan"]["version"] == 2
    _, snapshot = await call(client, "GET", "/runs/{run_id}/snapshot", f"/runs/{run_id}/snapshot")
    assert snapshot["plans"]["phases"]["members"] == ["a", "b", "fix"]
    assert snapshot["nodes"]["phases.fix"]["result"] == "fix done"
    _, page = await call(
        client, "GET", "/runs/{run_id}/history", f"/runs/{run_id}/history?limit=1000"
    )
    expanded = [r["plan"]["version"] for r in page["records"] if r["kind"] == "expand"]
    assert expanded == [1, 2]
    assert (await call(client, "GET", "/runs/{run_id}", f"/runs/{run_id}"))[0] == 200


# ------------------------------------------------------------------------- fuzzing

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
_PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "graph": st.sampled_from(["hello", "gated", "../hello", "", "hello.yaml"]),
    "graph_yaml": st.sampled_from([GATED, "nodes: [", "nodes: []", "a: *b", GATED[:200]]),
    "input": st.sampled_from([{}, {"topic": "fuzz"}, {"who": "x"}, {"topic": 2**70}]),
    "run_id": st.sampled_from(["fuzz-1", "bad id", "x" * 200]),
    "interrupt_id": st.sampled_from(["{waiting}:spec:spec_review", "nope"]),
    "trigger": st.sampled_from(["confirm", "reject", "timeout", "ok", "x y"]),
    "at_seq": st.integers(-3, 40),
    "reason": st.text(max_size=20),
}
_VALID: dict[str, list[Any]] = {
    "createRun": [{"graph": "hello"}, {"graph_yaml": GATED, "input": {"topic": "fuzz"}}],
    "reply": [
        {"interrupt_id": "{waiting}:spec:spec_review", "trigger": "reject", "payload": {"x": 1}}
    ],
    "fork": [{}, {"at_seq": 2, "data": {"who": "fuzz"}}],
    "cancel": [{}, {"reason": "fuzz"}],
}
_RUN_IDS = (
    st.sampled_from(["{done}", "{waiting}"])
    | st.sampled_from(["nope", "..", "a%20b"])
    | st.text(st.characters(codec="ascii", exclude_characters="/?#%"), min_size=1, max_size=12)
)
_OPERATIONS = [
    (template, method, operation)
    for template, item in SPEC["paths"].items()
    for method, operation in item.items()
    if method in METHODS
]


def _body(operation: dict[str, Any]) -> st.SearchStrategy[Any]:
    content = operation.get("requestBody", {}).get("content", {})
    properties = _resolve(content.get("application/json", {}).get("schema", {})).get(
        "properties", {}
    )
    plausible = {key: _PLAUSIBLE.get(key, _JSON) for key in properties}
    mixed = {key: value | _JSON for key, value in plausible.items()}
    return st.one_of(
        st.sampled_from(_VALID.get(operation["operationId"], [None])),
        st.fixed_dictionaries({}, optional=plausible),
        st.fixed_dictionaries({}, optional=mixed),
        _JSON,
        st.binary(max_size=40),
        st.none(),
    )


def _query(operation: dict[str, Any]) -> st.SearchStrategy[dict[str, str]]:
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    value = st.integers(0, 12).map(str) | st.integers(-5, 3000).map(str) | st.text(max_size=6)
    return st.fixed_dictionaries({}, optional={name: value for name in names})


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, str, dict[str, str], Any, dict[str, str]]:
    template, method, operation = draw(st.sampled_from(_OPERATIONS))
    path = template.replace("{run_id}", quote(draw(_RUN_IDS), safe="{}"))
    path = path.replace("{name}", draw(st.sampled_from(["app.js", "index.html", "nope.js", ".."])))
    headers = {}
    if template.endswith("/events"):
        headers = draw(
            st.fixed_dictionaries(
                {}, optional={"Last-Event-ID": st.sampled_from(["0-0", "2-1", "x", "99999-0"])}
            )
        )
    return template, method, path, draw(_query(operation)), draw(_body(operation)), headers


@pytest.fixture
async def fuzz_target(client: TestClient) -> tuple[TestClient, dict[str, str]]:
    done = (await (await client.post("/runs", json={"graph": "hello"})).json())["run_id"]
    body = {"graph_yaml": GATED, "input": {"topic": "fuzz"}}
    waiting = (await (await client.post("/runs", json=body)).json())["run_id"]
    await wait_for(client, waiting, lambda v: v["status"] == "waiting")
    return client, {"done": done, "waiting": waiting}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=_requests())
async def test_fuzz_finds_no_server_errors(
    fuzz_target: tuple[TestClient, dict[str, str]],
    request: tuple[str, str, str, dict[str, str], Any, dict[str, str]],
) -> None:
    client, ids = fuzz_target
    template, method, path, query, body, headers = request
    path = path.replace("%7Bdone%7D", ids["done"]).replace("%7Bwaiting%7D", ids["waiting"])
    path = path.replace("{done}", ids["done"]).replace("{waiting}", ids["waiting"])
    data = (
        body
        if isinstance(body, bytes)
        else None
        if body is None
        else json.dumps(body).replace("{waiting}", ids["waiting"]).encode()
    )
    async with client.request(
        method.upper(), path, params=query, data=data, headers=headers
    ) as response:
        assert response.status < 500, await response.text()
        if response.content_type == "text/event-stream":
            check(response, None, template, method)
            return  # a live stream: the headers are what we check
        parsed = await response.json() if "json" in response.content_type else None
        if isinstance(parsed, dict) and parsed.get("code") in ("not_found", "method_not_allowed"):
            # The router's answer: a run id like "." made the path another route's, or none.
            jsonschema.Draft202012Validator(PROBLEM).validate(parsed)
            return
        check(response, parsed, template, method)
