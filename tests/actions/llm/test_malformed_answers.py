"""Answers that are not a chat completion, and streams cut short, over real HTTP.

Each is an ``llm_failure`` that names the model, the endpoint and what came back, and is
retried (``retries`` times) like a lost connection, never an ``internal_error``.
"""

from __future__ import annotations

import pytest

from model_kit import agent_node, graph_text, run_agent
from phasegraph.model import RunStatus

FAULTS = [
    ("invalid_json", False, "answered with invalid JSON", '{"id": "chatcmpl-'),
    ("html", False, "answered with an HTML page", "502 Bad Gateway"),
    ("no_message", False, "answered with a choice without a message", '"finish_reason": "stop"'),
    ("no_choices", False, "answered with no choices", '"choices": []'),
    # A body cut short is a lost connection: the client retries it itself.
    ("cut_stream", False, "cannot be reached", "peer closed connection"),
    ("no_choices", True, "answered with a stream that ended before the answer did", ""),
    ("garbage_line", True, "answered with a stream line that is not JSON", "upstream hiccup"),
    ("cut_stream", True, "answered with a stream cut mid-answer", "peer closed connection"),
]


def _node(stream: bool, retries: int) -> dict[str, object]:
    return agent_node({"tools": [], "stream": stream, "retries": retries})


@pytest.mark.parametrize(("fault", "stream", "what", "excerpt"), FAULTS)
async def test_a_broken_answer_is_a_retried_llm_failure(serve, fault, stream, what, excerpt):
    server = await serve([{"fault": fault}, {"content": "fine now"}])
    state, _ = await run_agent(graph_text(_node(stream, retries=1)))
    assert state.status is RunStatus.COMPLETED, state.nodes["agent"].error
    assert state.data["conversation"][-1]["content"] == "fine now"
    assert server.request_count == 2


@pytest.mark.parametrize(("fault", "stream", "what", "excerpt"), FAULTS)
async def test_a_broken_answer_names_model_endpoint_and_what_came_back(
    serve, fault, stream, what, excerpt
):
    server = await serve([{"fault": fault}] * 3)
    _, history = await run_agent(graph_text(_node(stream, retries=2)))
    [failed] = [r for r in history if r.trigger == "error"]
    payload = failed.result["payload"]
    assert payload["error_code"] == "llm_failure"
    assert payload["retryable"] is True
    message = payload["message"]
    assert message.startswith(f"model 'main' at {server.base_url} {what}")
    assert excerpt in message
    assert "object has no attribute" not in message
    assert server.request_count == 3  # the first call and two retries
