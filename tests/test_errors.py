"""The error tree: one code per class, every code mapped, context carried to the user.

The refusals that used to be bare builtin exceptions are driven through their real
paths (a stopped worker thread, a store used from a second event loop, a request body
over a socket) and must surface as the phasegraph error the tree gives them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from pathlib import Path

import pytest

from builders import TESTS
from phasegraph import Engine, cli, errors
from phasegraph.cli._support import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_FOR_CODE, EXIT_STOPPED
from phasegraph.errors import (
    ErrorCode,
    InputError,
    PhasegraphError,
    RequestError,
    StoreError,
    StoreUnavailableError,
)
from phasegraph.server._app import STATUS_FOR
from phasegraph.store import open_store
from phasegraph.store._thread_worker import ThreadWorker
from phasegraph.store.memory import MemoryStore
from phasegraph.store.redis import RedisStore
from server.test_server import serving, settings_for

CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, PhasegraphError) and cls.__module__ == errors.__name__
]

ASKED = """
graph: asked
nodes:
  - id: gate
    machine: task
    bind:
      run: {human: approval, triggers: [ok, fail]}
"""


# ------------------------------------------------------------------------- codes


def test_each_class_declares_its_own_code_and_every_code_has_one_class() -> None:
    assert all("code" in vars(cls) for cls in CLASSES)
    codes = [cls.code for cls in CLASSES]
    assert len(codes) == len(set(codes))
    assert set(codes) == set(ErrorCode)


def test_the_root_code_is_not_a_store_code() -> None:
    store_codes = {cls.code for cls in CLASSES if issubclass(cls, StoreError)}
    assert PhasegraphError("x").code not in store_codes
    assert "store" not in PhasegraphError.code


def test_every_code_has_an_exit_status_and_an_http_status() -> None:
    assert set(EXIT_FOR_CODE) == set(ErrorCode)
    assert set(EXIT_FOR_CODE.values()) == {EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED}
    assert set(STATUS_FOR) == set(ErrorCode)
    assert all(400 <= status < 600 for status in STATUS_FOR.values())


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    """Each drawn line names a class, its builtin base, its code; nesting is inheritance."""
    drawn = re.findall(r"^    ([│├└─ ]*)(\w+)(?:\((\w+)\))?\s+(\w+)", errors.__doc__ or "", re.M)
    assert {name for _, name, _, _ in drawn} == {cls.__name__ for cls in CLASSES}
    parents: list[str] = []
    for prefix, name, builtin, code in drawn:
        cls = getattr(errors, name)
        depth = len(prefix) // 4
        parent = parents[depth - 1] if depth else "Exception"
        parents[depth:] = [name]
        assert cls.code == code
        assert [base.__name__ for base in cls.__bases__] == [parent, *filter(None, [builtin])]


# ------------------------------------------------------------- replaced builtins


async def test_a_stopped_worker_thread_is_an_unavailable_store() -> None:
    worker = ThreadWorker("errors-test")
    assert await worker.call(lambda: 1) == 1
    worker.stop()
    with pytest.raises(StoreUnavailableError, match="'errors-test' is stopped") as caught:
        await worker.call(lambda: 2)
    assert caught.value.code is ErrorCode.STORE_UNAVAILABLE


@pytest.mark.redis
def test_a_redis_store_used_from_a_second_event_loop_is_a_store_error(redis_url: str) -> None:
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    store = open_store(f"{redis_url}?prefix=errors-loops")
    try:
        assert first.run_until_complete(store.list_runs()) == []
        with pytest.raises(StoreError, match="another event loop") as caught:
            second.run_until_complete(store.list_runs())
        assert caught.value.code is ErrorCode.STORE
        first.run_until_complete(store.aclose())
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of none, optional, required"),
        ("ssl_ca_certs=/no/ca.pem", "cannot read ssl_ca_certs '/no/ca.pem'"),
        ("ssl_certfile=/no/me.pem", "cannot load ssl_certfile '/no/me.pem'"),
    ],
)
def test_unusable_tls_options_are_input_errors_naming_the_url(query: str, why: str) -> None:
    """Built directly (no ``open_store`` checks first), the store still refuses them."""
    with pytest.raises(InputError) as caught:
        RedisStore(f"rediss://:hunter2@localhost/0?{query}")
    assert str(caught.value).startswith(f"store URL rediss://:***@localhost/0?{query}: {why}")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"graph": NaN}', "body: not valid JSON (NaN is not valid JSON)"),
        (b'{"graph": -Infinity}', "body: not valid JSON (-Infinity is not valid JSON)"),
        (b'{"graph": "hello"', "body: not valid JSON (Expecting ',' delimiter"),
    ],
)
async def test_a_body_that_is_not_json_is_a_bad_request(
    tmp_path: Path, body: bytes, why: str
) -> None:
    headers = {"Content-Type": "application/json"}
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        response = await client.post("/runs", data=body, headers=headers)
        problem = await response.json()
    assert response.status == 400
    assert problem["code"] == RequestError.code == "bad_request"
    assert problem["detail"].startswith(why)
    assert [p["field"] for p in problem["problems"]] == ["body"]


# ------------------------------------------------------------------- context


async def test_an_illegal_reply_names_run_node_and_legal_triggers_over_http(
    tmp_path: Path,
) -> None:
    async with MemoryStore() as store, serving(Engine(store), settings_for(tmp_path)) as client:
        created = await client.post("/runs", json={"graph_yaml": ASKED, "run_id": "asked-1"})
        assert created.status == 201, await created.text()
        reply = {"interrupt_id": "asked-1:gate:run", "trigger": "maybe"}
        deadline = time.monotonic() + 30  # the run reaches its gate in a background task
        while True:
            response = await client.post("/runs/asked-1/reply", json=reply)
            problem = await response.json()
            if problem.get("code") != "run_state" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
    assert (response.status, problem["code"]) == (409, "illegal_trigger")
    assert (problem["run_id"], problem["node_id"]) == ("asked-1", "gate")
    assert problem["legal_triggers"] == ["fail", "ok"]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_errors_carry_code_and_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = tmp_path / "asked.yaml"
    graph.write_text(ASKED, encoding="utf-8")
    store = ["--store", f"sqlite:///{tmp_path}/runs.db", "-q"]
    assert _cli(capsys, "run", str(graph), "--run-id", "r1", *store)[0] == 3
    reply = ["--id", "r1:gate:run", "--trigger", "maybe"]
    code, out, err = _cli(capsys, "reply", "r1", *reply, "--json", *store)
    assert code == EXIT_FOR_CODE[ErrorCode.ILLEGAL_TRIGGER]
    error = json.loads(out)["error"]
    assert (error["code"], error["run_id"], error["node_id"]) == ("illegal_trigger", "r1", "gate")
    assert error["legal_triggers"] == ["fail", "ok"]
    assert err.startswith("phasegraph: node 'gate': trigger 'maybe'")

    code, out, _ = _cli(capsys, "status", "nobody", "--json", *store)
    assert code == EXIT_BAD_INPUT
    assert json.loads(out) == {
        "error": {
            "code": "run_not_found",
            "message": "no run 'nobody' in this store",
            "run_id": "nobody",
            "store": f"sqlite:///{tmp_path}/runs.db",
            "store_file": f"{tmp_path}/runs.db",
        }
    }


def test_cli_json_spec_error_carries_the_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = TESTS / "fixtures" / "graphs" / "cycle.yaml"
    store = ["--store", f"sqlite:///{tmp_path}/runs.db", "-q"]
    code, out, _ = _cli(capsys, "run", str(broken), "--json", *store)
    assert code == EXIT_BAD_INPUT
    error = json.loads(out)["error"]
    assert error["code"] == "spec_invalid"
    assert error["location"].startswith(str(broken))
    assert error["location"] == error["problems"][0]["location"]
