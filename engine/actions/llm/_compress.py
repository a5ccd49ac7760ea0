"""Compress a conversation: summarize its older turns, keep the recent ones word for word.

A compression is a step of its own (the ``compressed`` outcome), committed before the
next model call, so a crash never loses it and a resumed run does not redo it. The older
part of the conversation is summarized by ``auxiliary_model``; when that fails or answers
nothing, by the main model. Nothing is ever dropped unsummarized: when there is nothing
older left to summarize (the recent turns alone are too long), the step fails with a
message saying so instead of truncating.

The cut keeps the last ``keep_recent`` messages, moved earlier so that it never separates
tool results from the assistant message that asked for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from phasegraph.actions._base import ActionContext, ActionResult
from phasegraph.actions.llm._client import ChatRequest, Endpoint, ProviderError, complete
from phasegraph.actions.llm._config import LlmConfig
from phasegraph.actions.llm._measure import (
    UNBOUNDED_COMPLETION,
    estimate_tokens,
    is_summary,
    most_prompt_tokens,
    summarized_turns,
    summary_head,
)
from phasegraph.model import frozen_map

__all__ = ["Compressor", "needs_compression"]

NEAR_LIMIT: Final = 0.8
"""Compress once a request would use this share of ``context_tokens``."""
_INSTRUCTIONS: Final = (
    "You compress the history of a conversation between a user, an assistant and its "
    "tools, for the assistant that continues it. Write a concise summary that keeps the "
    "task, every decision taken, facts and file contents learned, errors met and what "
    "remains to be done. Answer with the summary only."
)


def needs_compression(
    config: LlmConfig, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]
) -> bool:
    """Whether a request of ``messages`` (and ``tools``) nears ``context_tokens``."""
    if config.context_tokens is None:
        return False
    return estimate_tokens([*messages, *tools]) >= NEAR_LIMIT * config.context_tokens


def _cut(conversation: Sequence[Mapping[str, Any]], keep: int) -> int:
    """Where the kept, recent part starts: never on a tool result."""
    cut = max(len(conversation) - keep, 0)
    while cut > 0 and conversation[cut].get("role") == "tool":
        cut -= 1
    return cut


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for message in messages:
        role = str(message.get("role", "?"))
        text = message.get("content") or ""
        calls = message.get("tool_calls")
        if calls:
            text += " [calls: " + json.dumps(calls, sort_keys=True, default=str) + "]"
        lines.append(f"{role}: {text}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Summary:
    text: str
    model: str
    failures: list[str]
    usage: Mapping[str, int]


class Compressor:
    """Summarizes older turns for one call of an ``llm:`` action."""

    def __init__(self, config: LlmConfig, endpoint: Endpoint) -> None:
        self._config = config
        self._endpoint = endpoint

    async def _summary(self, ctx: ActionContext, older: Sequence[Mapping[str, Any]]) -> _Summary:
        """The summary, and why any model tried before the one that wrote it failed."""
        config = self._config
        messages = [
            {"role": "system", "content": _INSTRUCTIONS},
            {"role": "user", "content": _transcript(older)},
        ]
        main = self._endpoint.model or config.model
        models = list(dict.fromkeys(m for m in (config.auxiliary_model, main) if m))
        failures: list[str] = []
        for index, model in enumerate(models):
            request = ChatRequest(
                model=model,
                messages=messages,
                max_tokens=config.max_tokens,
                timeout=config.timeout,
                retries=config.retries,
            )
            last = index == len(models) - 1
            # Reserved like any call (a refusal opens the run's budget gate).
            if ctx.spend_limited:
                prompt = most_prompt_tokens(messages)
                await ctx.reserve((model,), prompt, config.max_tokens or UNBOUNDED_COMPLETION)
            try:
                completion = await complete(self._endpoint, request)
            except ProviderError as exc:
                if last:
                    raise
                failures.append(f"{model}: {exc.message}")
                continue
            text = str(completion.message.get("content") or "").strip()
            if text:
                return _Summary(text, model, failures, completion.usage)
            failures.append(f"{model}: answered an empty summary")
        raise ProviderError(
            "no model could summarize the conversation: " + "; ".join(failures), retryable=True
        )

    async def compress(
        self, ctx: ActionContext, conversation: list[Mapping[str, Any]], trigger: str
    ) -> ActionResult:
        """Summarize the older turns; the result fires ``trigger``.

        Raises:
            ProviderError: Nothing older is left to summarize, or no model could.
        """
        cut = _cut(conversation, self._config.keep_recent)
        older, recent = conversation[:cut], conversation[cut:]
        if not older or (len(older) == 1 and is_summary(older[0])):
            raise ProviderError(
                f"the conversation in {self._config.conversation!r} is too long for the model "
                f"even after compression: its last {len(recent)} messages alone are about "
                f"{estimate_tokens(recent)} tokens; lower keep_recent or raise context_tokens",
                retryable=False,
            )
        summary = await self._summary(ctx, older)
        head = summary_head(summarized_turns(older))
        compressed = [{"role": "user", "content": head + summary.text}, *recent]
        details = {
            "summarized": len(older),
            "kept": len(recent),
            "model": summary.model,
            "tokens_before": estimate_tokens(conversation),
            "tokens_after": estimate_tokens(compressed),
        }
        if summary.failures:
            details["fallback_from"] = summary.failures
        message = f"summarized {len(older)} messages with {summary.model}"
        ctx.emit("conversation_compressed", {**details, "message": message})
        return ActionResult(
            trigger=trigger,
            data=frozen_map({self._config.conversation: compressed}),
            payload=frozen_map({"compressed": len(older)}),
            # The summary's instructions as sent; its user message is the transcript of
            # the messages it summarized, which the records before this one hold.
            output=frozen_map(
                {"compression": details, "usage": dict(summary.usage), "system": _INSTRUCTIONS}
            ),
            spend=frozen_map(
                ctx.price(
                    (summary.model,),
                    int(summary.usage.get("prompt_tokens", 0)),
                    int(summary.usage.get("completion_tokens", 0)),
                )
            ),
        )
