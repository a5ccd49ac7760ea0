"""Model actions: ``llm:`` (one chat-completion call) and ``tools:`` (run the model's calls).

Owns the ``openai`` client (``_client``, its only importer) and a scripted
OpenAI-compatible server (``_scripted``, on aiohttp) that tests and offline examples
answer from. Loaded only when a graph binds one of these kinds.

May import :mod:`phasegraph.actions`' own modules, :mod:`phasegraph.model` and
:mod:`phasegraph.errors`.
"""

from __future__ import annotations

__all__: list[str] = []
