"""A python action that calls a model itself says "the provider failed" with ProviderError.

The ``error`` trigger classifies it as ``llm_failure``: a fallback chain's emergency
reports a provider failure, with its suggestions, not a failure of the user's code.
"""

from __future__ import annotations

from pathlib import Path

from phasegraph.actions import ProviderError
from phasegraph.actions._failures import classify_error
from phasegraph.api import Engine
from phasegraph.model import RunStatus
from phasegraph.spec import load_graph
from phasegraph.store.memory import MemoryStore

_GRAPH = """
graph: asks
nodes:
  - id: ask
    machine: fallback_chain
    with: {recovery: {enabled: false}}
    bind:
      main: {python: "model_call:ask", triggers: [ok]}
      recover: {python: "phasegraph.concerns.fallback:recover", triggers: [retry]}
      emergency: {python: "phasegraph.concerns.fallback:emergency", triggers: [fail]}
"""

_MODULE = """
from phasegraph.actions import ProviderError


def ask(ctx):
    raise ProviderError("the provider answered 503", status=503, retry_after=2.0)
"""


def test_a_provider_error_is_classified_llm_failure() -> None:
    payload = classify_error(ProviderError("rate limited", status=429, retry_after=1.5))
    assert payload["error_code"] == "llm_failure"
    assert payload["retryable"] is True
    assert payload["retry_after"] == 1.5
    refused = classify_error(ProviderError("bad request", status=400, retryable=False))
    assert (refused["error_code"], refused["retryable"]) == ("llm_failure", False)


async def test_a_python_action_raising_it_ends_in_a_provider_emergency(tmp_path: Path) -> None:
    (tmp_path / "asks.yaml").write_text(_GRAPH)
    (tmp_path / "model_call.py").write_text(_MODULE)
    async with MemoryStore() as store:
        state = await Engine(store).run(load_graph(tmp_path / "asks.yaml"), {}, run_id="r")

    assert state.status is RunStatus.FAILED
    error = state.data["error"]
    assert error["error_code"] == "llm_failure"
    assert error["message"] == "The model provider failed."
    assert "the provider answered 503" in error["original_error"]
