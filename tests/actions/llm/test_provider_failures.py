"""Provider failures are classified; a key never reaches the run's record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from model_kit import agent_node, graph_text, run_agent
from phasegraph.model import NodeOutcome, RunStatus

KEY = "sk-test-0123456789abcdefSECRET"


def failed_payload(history):
    [failed] = [r for r in history if r.trigger == "error"]
    return failed.result["payload"]


async def test_a_429_is_retried_after_the_wait_the_provider_asks(serve) -> None:
    server = await serve([{"error": 429, "retry_after": 1}, {"content": "ok now"}])
    started = time.monotonic()
    state, _ = await run_agent(graph_text(agent_node({"tools": []})))
    assert state.status is RunStatus.COMPLETED
    assert state.data["conversation"][-1]["content"] == "ok now"
    assert server.request_count == 2
    assert time.monotonic() - started >= 1.0  # Retry-After honoured (a lower bound only)


@pytest.mark.parametrize(
    ("entry", "status"),
    [({"error": 500, "message": "overloaded"}, 500), ({"error": 429, "retry_after": 7}, 429)],
)
async def test_server_errors_and_rate_limits_are_retryable_llm_failures(
    serve, entry, status
) -> None:
    server = await serve([entry])
    state, history = await run_agent(graph_text(agent_node({"tools": [], "retries": 0})))
    payload = failed_payload(history)
    assert payload["error_code"] == "llm_failure"
    assert payload["retryable"] is True
    assert payload["status"] == status
    if status == 429:
        assert payload["retry_after"] == 7
    assert state.nodes["agent"].outcome is NodeOutcome.FAILED
    assert server.request_count == 1


async def test_a_slow_answer_is_a_retryable_timeout(serve) -> None:
    await serve([{"content": "late", "delay": 3}])
    node = agent_node({"tools": [], "retries": 0}, timeout=0.3)
    _, history = await run_agent(graph_text(node))
    payload = failed_payload(history)
    assert payload["error_code"] == "llm_failure"
    assert payload["retryable"] is True
    assert "did not answer in time" in payload["message"]


async def test_other_client_errors_are_not_retryable_and_keep_the_provider_message(
    serve,
) -> None:
    server = await serve([{"error": 404, "message": "The model 'main' does not exist"}])
    _, history = await run_agent(graph_text(agent_node({"tools": []})))
    payload = failed_payload(history)
    assert payload["retryable"] is False
    assert "The model 'main' does not exist" in payload["message"]
    assert server.request_count == 1  # not retried


async def test_the_key_is_sent_but_never_stored(serve, monkeypatch, tmp_path: Path) -> None:
    # The provider echoes the key in its error: the message must not carry it.
    server = await serve([{"error": 401, "message": f"Incorrect API key provided: {KEY}"}])
    monkeypatch.setenv("PHASEGRAPH_LLM_API_KEY", KEY)
    database = tmp_path / "runs.db"
    state, history = await run_agent(
        graph_text(agent_node({"tools": []})), store_url=f"sqlite:///{database}"
    )
    assert server.request_count == 1
    assert state.nodes["agent"].outcome is NodeOutcome.FAILED
    assert "Incorrect API key provided: ***" in failed_payload(history)["message"]
    written = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("runs.db*")))  # noqa: ASYNC240
    assert written
    assert KEY.encode() not in written
    assert KEY not in repr(history)
    assert KEY not in repr(state)


async def test_the_key_comes_from_the_variable_the_settings_name(serve, monkeypatch) -> None:
    server = await serve([{"content": "hello"}])
    monkeypatch.setenv("MY_MODEL_KEY", KEY)
    node = agent_node({"tools": []}, settings={"llm": {"api_key_env": "MY_MODEL_KEY"}})
    state, _ = await run_agent(graph_text(node))
    assert state.status is RunStatus.COMPLETED
    assert server.authorizations == [f"Bearer {KEY}"]
