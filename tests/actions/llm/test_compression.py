"""Compression: older turns summarized by the auxiliary model, as a committed step."""

from __future__ import annotations

from pathlib import Path

from model_kit import agent_node, call, graph_text, run_agent
from phasegraph.actions.llm._measure import SUMMARY_PREFIX
from phasegraph.model import NodeOutcome, RunStatus

LONG = "x" * 1000  # about 250 tokens


def turns(count: int) -> list[dict]:
    """Tool calls with long arguments: the conversation grows by ~300 tokens a turn."""
    return [
        {"model": "main", "tool_calls": [call("write_file", path=f"f{n}.txt", text=LONG)]}
        for n in range(count)
    ]


def node(tmp_path: Path, **llm) -> dict:
    request = {"tools": ["write_file"], "auxiliary_model": "small", "context_tokens": 1000}
    request.update(llm)
    return agent_node(request, settings={"workspace": str(tmp_path)}, node_id="agent")


async def test_near_the_budget_older_turns_are_summarized_by_the_auxiliary_model(
    serve, tmp_path: Path
) -> None:
    script = [
        *turns(3),
        {"model": "small", "content": "Wrote f0, f1 and f2."},
        {"model": "main", "content": "Done."},
    ]
    server = await serve(script)
    state, history = await run_agent(graph_text(node(tmp_path, keep_recent=2)))

    assert state.status is RunStatus.COMPLETED
    [compressed] = [r for r in history if r.trigger == "compressed"]
    details = compressed.result["output"]["compression"]
    assert details["model"] == "small"
    assert details["tokens_after"] < details["tokens_before"]
    # The summary request went to the auxiliary model, with the older turns only.
    [summary_request] = [r for r in server.requests if r["model"] == "small"]
    assert "f0.txt" in summary_request["messages"][1]["content"]
    # The committed conversation starts with the summary and keeps the recent turns as
    # they were; the model's next request is the compressed conversation.
    conversation = compressed.data["conversation"]
    assert conversation[0]["content"] == SUMMARY_PREFIX + " (2 turns):\nWrote f0, f1 and f2."
    assert [m["role"] for m in conversation[1:]] == ["assistant", "tool"]
    after = server.requests[server.requests.index(summary_request) + 1]
    assert after["messages"] == conversation
    assert state.data["conversation"][-1]["content"] == "Done."
    assert "conversation_compressed" in [e["kind"] for e in compressed.events]


async def test_an_auxiliary_failure_or_empty_summary_falls_back_to_the_main_model(
    serve, tmp_path: Path
) -> None:
    script = [
        *turns(3),
        {"model": "small", "content": ""},
        {"model": "main", "content": "Summary by the main model."},
        {"model": "main", "content": "Done."},
    ]
    await serve(script)
    state, history = await run_agent(graph_text(node(tmp_path, keep_recent=2)))
    [compressed] = [r for r in history if r.trigger == "compressed"]
    details = compressed.result["output"]["compression"]
    assert details["model"] == "main"
    assert details["fallback_from"] == ["small: answered an empty summary"]
    assert state.data["conversation"][0]["content"].endswith("Summary by the main model.")


async def test_a_context_length_refusal_compresses_instead_of_failing(
    serve, tmp_path: Path
) -> None:
    # No context_tokens: only the provider's refusal triggers the compression.
    script = [
        *turns(2),
        {"model": "main", "error": "context_length"},
        {"model": "small", "content": "Two files written."},
        {"model": "main", "content": "Done."},
    ]
    server = await serve(script)
    state, history = await run_agent(graph_text(node(tmp_path, context_tokens=None, keep_recent=2)))
    assert state.status is RunStatus.COMPLETED
    assert [r.trigger for r in history if r.source == ("think",)] == [
        "tool_calls",
        "tool_calls",
        "compressed",
        "answer",
    ]
    assert server.request_count == 5


async def test_no_blind_truncation_when_nothing_older_is_left(serve, tmp_path: Path) -> None:
    await serve([{"error": "context_length"}])
    state, history = await run_agent(graph_text(node(tmp_path, context_tokens=None)))
    assert state.nodes["agent"].outcome is NodeOutcome.FAILED
    [failed] = [r for r in history if r.trigger == "error"]
    assert "even after compression" in failed.result["payload"]["message"]
    assert failed.result["payload"]["retryable"] is False
    assert "conversation" not in state.data  # nothing was cut
