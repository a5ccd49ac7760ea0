"""``http:`` actions against a real server on a loopback port: what is sent, what is kept."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders import REPO, cli_argv, free_port
from http_kit import TOKEN_ENV, Server
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.actions._build import build_action
from phasegraph.actions._failures import classify_error
from phasegraph.actions._http import BODY_CHARS, DEFAULT_TIMEOUT
from phasegraph.api import Engine
from phasegraph.errors import ActionError, ActionTimeoutError
from phasegraph.model import ActionDef, NodeOutcome, RunState, RunStatus, StepRecord
from phasegraph.spec import _schema as schema
from phasegraph.spec import load_graph_text
from phasegraph.store import open_store


def binding(action: dict[str, Any]) -> ActionDef:
    """The definition the loader makes of one binding (validated by the graph format)."""
    graph = {"nodes": [{"id": "call", "machine": "task", "bind": {"run": action}}]}
    checked = schema.check_graph(graph)
    assert checked.issues == ()
    assert checked.spec is not None
    spec = checked.spec.nodes[0].bind["run"]
    config = spec.model_dump(by_alias=True, exclude_none=True)
    return ActionDef(kind=spec.kind, config=config, triggers=spec.declared_triggers())


async def call(action: dict[str, Any], **values: Any) -> ActionResult:
    """Build the action and call it once with ``values`` as the run's input."""
    ctx = ActionContext(
        run_id="run-1", node_id="call", state="run", hook="run", input=values, data={}
    )
    return await build_action(binding(action))(ctx)


def graph_text(bind: dict[str, Any], *, machine: str = "task", writes: list[str] | None = None):
    node: dict[str, Any] = {"id": "call", "machine": machine, "bind": bind}
    if writes is not None:
        node["writes"] = writes
    return json.dumps({"nodes": [node]})  # JSON is YAML


async def run_graph(
    text: str, run_input: dict[str, Any] | None = None, store_url: str = "memory://"
) -> tuple[RunState, list[StepRecord]]:
    definition = load_graph_text(text, name="http_graph.yaml")
    async with open_store(store_url) as store:
        engine = Engine(store)
        state = await engine.run(definition, run_input)
        return state, await engine.history(state.run_id)


def files(folder: Path, pattern: str) -> dict[str, bytes]:
    """The bytes of every file in ``folder`` matching ``pattern`` (the database and its WAL)."""
    found = {path.name: path.read_bytes() for path in folder.glob(pattern)}
    assert found
    return found


async def test_values_in_the_url_are_percent_encoded(server: Server) -> None:
    url = server.url + "/echo/{name}?q={q}&n={n}"
    result = await call({"http": {"url": url}}, name="a/../b c", q="x&y=z é", n=3)
    assert result.trigger == "ok"
    [seen] = server.seen
    assert seen["method"] == "GET"
    assert seen["raw_path"] == "/echo/a%2F..%2Fb%20c?q=x%26y%3Dz%20%C3%A9&n=3"
    assert seen["query"] == {"q": "x&y=z é", "n": "3"}
    assert dict(result.payload) == {"status": 200}
    assert result.output["method"] == "GET"
    assert result.output["url"] == server.url + "/echo/a%2F..%2Fb%20c"  # no query kept
    assert result.output["status"] == 200


async def test_post_sends_the_json_body_and_header_templates(server: Server) -> None:
    action = {
        "http": {
            "url": server.url + "/echo/items",
            "method": "POST",
            "headers": {"X-Request-Id": "req-{n}"},
            "body": {"title": "{title}", "count": 3, "tags": ["{tag}", True]},
        }
    }
    result = await call(action, title="Ada's {notes}", tag="t", n=5)
    assert result.trigger == "ok"
    [seen] = server.seen
    assert seen["method"] == "POST"
    assert seen["content_type"] == "application/json"
    # One pass: braces inside a substituted value are not filled again.
    assert json.loads(seen["body"]) == {"title": "Ada's {notes}", "count": 3, "tags": ["t", True]}
    assert seen["headers"]["x-request-id"] == "req-5"


async def test_a_string_body_is_sent_as_is(server: Server) -> None:
    plain = {"http": {"url": server.url + "/echo/", "method": "PUT", "body": "hello {who}"}}
    await call(plain, who="ada")
    typed = {
        "http": {
            "url": server.url + "/echo/",
            "method": "POST",
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "body": "who={who}",
        }
    }
    await call(typed, who="ada")
    assert [(s["content_type"], s["body"]) for s in server.seen] == [
        ("text/plain", "hello ada"),
        ("application/x-www-form-urlencoded", "who=ada"),
    ]


STATUS_MAP = {"404": "missing", "4xx": "refused", "2xx": "ok", "default": "other"}


@pytest.mark.parametrize(
    ("status", "trigger"),
    [(200, "ok"), (204, "ok"), (404, "missing"), (418, "refused"), (302, "other"), (503, "other")],
)
async def test_the_status_picks_the_trigger(server: Server, status: int, trigger: str) -> None:
    action = {"http": {"url": server.url + f"/status/{status}"}, "on_status": STATUS_MAP}
    result = await call(action)
    assert result.trigger == trigger  # a code, else its class, else default; 3xx not followed
    assert result.output["status"] == status
    if status < 400:
        assert dict(result.payload) == {"status": status}
    else:  # what a fallback chain needs to say why: the call, the status, the body
        assert result.payload["error_code"] == "action_failed"
        assert result.payload["action"] == "http"
        url = server.url + f"/status/{status}"
        assert result.payload["message"].startswith(f"GET {url} answered {status}")


async def test_an_unmapped_status_fails_naming_what_is_mapped(server: Server) -> None:
    action = {"http": {"url": server.url + "/status/500"}, "on_status": {"200": "ok"}}
    with pytest.raises(ActionError) as caught:
        await call(action)
    assert str(caught.value) == (
        f"GET {server.url}/status/500 answered 500, which on_status does not map "
        "(it maps 200): add 500, 5xx or default"
    )


async def test_a_json_response_is_captured_into_run_data(server: Server) -> None:
    bind = {"run": {"http": {"url": server.url + "/json"}, "capture": "reply"}}
    state, history = await run_graph(graph_text(bind, writes=["reply"]))
    assert state.status is RunStatus.COMPLETED
    assert state.data["reply"] == {"id": 7, "items": [1, 2], "name": "café"}
    [step] = [record for record in history if record.kind == "transition"]
    assert step.result["output"]["status"] == 200
    assert json.loads(step.result["output"]["body"]) == state.data["reply"]


async def test_a_text_response_is_captured_as_text_and_the_record_keeps_a_slice(
    server: Server,
) -> None:
    result = await call({"http": {"url": server.url + "/text"}, "capture": "page"})
    assert dict(result.data) == {"page": "plain words"}
    big = await call({"http": {"url": server.url + "/big"}, "capture": "page"})
    assert big.data["page"] == "x" * 5000
    assert big.output["body"] == "x" * BODY_CHARS


async def test_a_secret_header_is_sent_but_never_recorded(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-4f9a1c7e5b2d"
    monkeypatch.setenv(TOKEN_ENV, secret)
    request = {
        "url": server.url + "/auth",
        "headers_from_env": {"Authorization": f"Bearer {{{TOKEN_ENV}}}"},
    }
    bind = {"run": {"http": request, "capture": "reply"}}
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    state, history = await run_graph(graph_text(bind, writes=["reply"]), store_url=store_url)
    # The server answers 200 only to the right token (401 would fire `fail`), and echoes it.
    assert state.nodes["call"].outcome is NodeOutcome.SUCCESS
    assert state.data["reply"] == {"authorization": "Bearer ***"}
    async with open_store(store_url) as store:
        engine = Engine(store)
        committed = await engine.history(state.run_id)
        head = await engine.get(state.run_id)
    assert committed == history
    assert secret not in repr(committed)
    assert secret not in repr(head)
    assert "Bearer ***" in repr(committed)  # the echo was recorded, masked
    for name, stored in files(tmp_path, "runs.db*").items():
        assert secret.encode() not in stored, name


async def test_a_missing_environment_variable_fails_naming_it(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    request = {"url": server.url + "/auth", "headers_from_env": {"X-Key": f"{{{TOKEN_ENV}}}"}}
    with pytest.raises(
        ActionError, match=f"header 'X-Key' needs environment variable '{TOKEN_ENV}'"
    ):
        await call({"http": request})
    assert server.calls == {}


async def test_a_request_past_its_timeout_is_abandoned_as_a_timeout(server: Server) -> None:
    with pytest.raises(ActionTimeoutError) as caught:
        await call({"http": {"url": server.url + "/slow?key=abc"}, "timeout": 0.2})
    assert str(caught.value) == (
        f"action of node 'call' ran past its timeout of 0.2 s: "
        f"GET {server.url}/slow sent no complete response"
    )
    classified = classify_error(caught.value)
    assert (classified["error_code"], classified["retryable"]) == ("timeout", True)


async def test_a_fallback_chain_retries_after_a_timeout(server: Server) -> None:
    bind = {
        # The first request is never answered; the retry is answered at once.
        "main": {"http": {"url": server.url + "/flaky"}, "timeout": 1},
        "recover": {"python": "phasegraph.concerns.fallback:recover", "triggers": ["retry"]},
        "emergency": {"python": "phasegraph.concerns.fallback:emergency", "triggers": ["fail"]},
    }
    state, _ = await run_graph(graph_text(bind, machine="fallback_chain"))
    assert state.status is RunStatus.COMPLETED
    assert state.nodes["call"].path == ("recovered",)
    assert server.calls["flaky"] == 2
    failed, retried = state.errors  # the classified error, then the recovery's warning
    assert failed.details["error_code"] == "timeout"
    assert failed.message == (
        f"action of node 'call' ran past its timeout of 1 s: "
        f"GET {server.url}/flaky sent no complete response"
    )
    assert retried.message.startswith("retry 1 of 1 after timeout: ")


async def test_a_refused_connection_is_one_clear_error() -> None:
    port = free_port()
    url = f"http://user:pw@127.0.0.1:{port}/items?key={{key}}"
    bind = {"run": {"http": {"url": url}}}
    state, _ = await run_graph(graph_text(bind), {"key": "q-secret"})
    assert state.status is RunStatus.FAILED
    error = state.nodes["call"].error or ""
    assert error.startswith(f"GET http://127.0.0.1:{port}/items failed: Cannot connect to host")
    assert "pw" not in error
    assert "q-secret" not in error
    with pytest.raises(ActionError) as caught:
        await call({"http": {"url": url}}, key="k")
    assert classify_error(caught.value)["error_code"] == "action_failed"


async def test_a_template_naming_a_missing_value_fails_the_step(server: Server) -> None:
    bind = {"run": {"http": {"url": server.url + "/echo/{nope}"}}}
    state, _ = await run_graph(graph_text(bind), {"who": "ada"})
    assert state.status is RunStatus.FAILED
    assert state.nodes["call"].error == (
        "template names {nope} but the run has no such value (known: who)"
    )
    assert server.seen == []


def test_the_guide_example_is_a_valid_binding() -> None:
    page = (REPO / "docs" / "guides" / "machines-and-graphs.md").read_text(encoding="utf-8")
    section = page.split("## HTTP actions", 1)[1]
    example = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    definition = binding(example["bind"]["run"])
    assert definition.triggers == ("ok", "missing", "retry", "fail")
    assert definition.config["timeout"] == 10
    # The format's default timeout is the one the action documents.
    assert binding({"http": {"url": "http://h/"}}).config["timeout"] == DEFAULT_TIMEOUT


async def test_a_graph_with_http_actions_runs_from_the_command_line(
    server: Server, tmp_path: Path
) -> None:
    graph = tmp_path / "fetch.yaml"
    graph.write_text(
        f"""\
graph: fetch
input: {{type: object, properties: {{who: {{type: string}}}}}}
nodes:
  - id: fetch
    machine: task
    writes: [reply]
    bind:
      run:
        http: {{url: "{server.url}/json"}}
        capture: reply
  - id: post
    machine: task
    needs: [fetch]
    bind:
      run:
        http:
          url: "{server.url}/echo/greetings/{{who}}"
          method: POST
          body: {{who: "{{who}}", id: "{{reply[id]}}"}}
        on_status: {{200: ok, default: fail}}
""",
        encoding="utf-8",
    )
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    process = await asyncio.create_subprocess_exec(
        *cli_argv("run", str(graph), "-q", "--store", store_url, "--input", "who=ada"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()
    [posted] = server.seen
    assert posted["raw_path"] == "/echo/greetings/ada"
    assert json.loads(posted["body"]) == {"who": "ada", "id": "7"}
    async with open_store(store_url) as store:
        [meta] = await Engine(store).list_runs()
        state = await Engine(store).get(meta.run_id)
    assert state.status is RunStatus.COMPLETED
    assert state.data["reply"]["items"] == [1, 2]
