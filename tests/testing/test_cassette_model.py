"""The cassette's model endpoint, called by phasegraph's own model client over a socket."""

from __future__ import annotations

import pytest

from phasegraph.actions.llm._client import ChatRequest, Endpoint, ProviderError, complete
from phasegraph.testing.cassettes import Cassette, Entry
from phasegraph.testing.cassettes._server import CassetteModel

MESSAGE = {
    "role": "assistant",
    "content": "Reading it first.",
    "tool_calls": [
        {
            "id": "call_from_the_provider_7",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
        }
    ],
}
CASSETTE = Cassette(
    graph="g", source="g", graph_digest="d", run="r", input={},
    entries=(
        Entry(at=5, node="agent", hook="think", kind="llm", turn=1,
              answer={"message": MESSAGE, "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
        Entry(at=9, node="agent", hook="think", kind="llm", turn=2,
              answer={"error": "the provider said no"}, outcome={"failed": "no"}),
    ),
)  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
async def test_the_recorded_message_comes_back_verbatim(stream: bool) -> None:
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], stream=stream)
    async with CassetteModel(CASSETTE) as model:
        endpoint = Endpoint(base_url=model.base_url_for("agent", "think", 1), api_key="")
        completion = await complete(endpoint, request)
    assert completion.message["content"] == MESSAGE["content"]
    # The provider's own tool-call id, so the conversation goes on as it did.
    assert completion.message["tool_calls"] == MESSAGE["tool_calls"]
    assert completion.finish_reason == "tool_calls"
    assert (completion.usage["prompt_tokens"], completion.usage["total_tokens"]) == (9, 13)
    assert model.missing == []


async def test_a_turn_without_an_answer_is_refused_and_noted() -> None:
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}], retries=0)
    async with CassetteModel(CASSETTE) as model:
        for node, hook, turn, said in [
            ("agent", "think", 3, "the cassette has no model answer for node 'agent', hook "
             "'think', turn 3"),
            ("agent", "think", 2, "the provider said no"),  # recorded as failed: fails again
        ]:  # fmt: skip
            endpoint = Endpoint(base_url=model.base_url_for(node, hook, turn), api_key="")
            with pytest.raises(ProviderError, match=said):
                await complete(endpoint, request)
        assert model.missing == [("agent", "think", 3)]
