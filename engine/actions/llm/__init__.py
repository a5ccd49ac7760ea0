"""Model actions: ``llm:`` (one chat-completion call) and ``tools:`` (run the model's calls).

Owns the ``openai`` client (``_client``, its only importer) and a scripted
OpenAI-compatible server (``_scripted``, on aiohttp) that tests and offline examples
answer from. Loaded only when a graph binds one of these kinds.

May import :mod:`phasegraph.actions`' own modules, :mod:`phasegraph.model` and
:mod:`phasegraph.errors`.
"""

from __future__ import annotations

from phasegraph.actions.llm._action import DELTA_EVENT, build_llm_action
from phasegraph.actions.llm._client import ProviderError
from phasegraph.actions.llm._config import DEFAULT_CONVERSATION, OUTCOMES, LlmConfig
from phasegraph.actions.llm._endpoint import BASE_URL_ENV, KEY_ENV, MODEL_ENV
from phasegraph.actions.llm._measure import SUMMARY_PREFIX, estimate_tokens
from phasegraph.actions.llm._scripted import ScriptedModelServer
from phasegraph.actions.llm._tools import ADVANCE_TRIGGER, OBSERVED_TRIGGER, build_tools_action

__all__ = [
    "ADVANCE_TRIGGER",
    "BASE_URL_ENV",
    "DEFAULT_CONVERSATION",
    "DELTA_EVENT",
    "KEY_ENV",
    "MODEL_ENV",
    "OBSERVED_TRIGGER",
    "OUTCOMES",
    "SUMMARY_PREFIX",
    "LlmConfig",
    "ProviderError",
    "ScriptedModelServer",
    "build_llm_action",
    "build_tools_action",
    "estimate_tokens",
]
