"""``llm:`` actions: one chat-completion call per step, the answer appended to a conversation.

The conversation is a list of chat messages held in run data under ``conversation``
(default ``conversation``). A call sends the rendered ``system`` message, the
conversation, and what this step adds to it: the rendered ``prompt`` as a user message
(when the conversation is empty or ends with the model's answer; when it ends with tool
results or a user message, the model is answering those) and
any corrective message middleware injected (loop detection). The step returns the
conversation with those messages and the assistant's answer appended, and fires
``tool_calls`` when the model called tools, ``answer`` otherwise (``on_outcome:`` renames them).

The model is offered the ``tools`` the node's current phase allows, described from the
tools themselves; a refused tool is not shown. Token usage goes to the node's ``tokens``
counter (``ActionResult.spend``), so a ``tokens`` budget with ``spend_on: []`` can stop
a node that used too many; ``prompt_tokens``, ``completion_tokens``, the model and the
finish reason are in the step record's output.

When the conversation nears ``context_tokens`` (80 % of it, counting about four
characters a token), or the provider refuses it as too long, the step compresses instead
of answering: :mod:`phasegraph.actions.llm._compress`, fired as ``compressed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from phasegraph.actions._base import Action, ActionContext, ActionResult
from phasegraph.actions._shell import render
from phasegraph.actions.llm._client import (
    ChatRequest,
    Completion,
    ProviderError,
    complete,
    warm_up,
)
from phasegraph.actions.llm._compress import Compressor, needs_compression
from phasegraph.actions.llm._config import LlmConfig
from phasegraph.actions.llm._endpoint import open_endpoint
from phasegraph.core._sources import current as stored_files
from phasegraph.errors import ActionError
from phasegraph.model import ActionDef, frozen_map

__all__ = ["DELTA_EVENT", "build_llm_action"]

DELTA_EVENT: Final = "llm_delta"
"""The live (never committed) event carrying a piece of streamed text."""


def _awaits_prompt(conversation: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the model is due a new prompt: nothing said yet, or it has answered."""
    return not conversation or conversation[-1].get("role") == "assistant"


@dataclass(frozen=True, slots=True)
class _Turn:
    """The messages of one request: what is kept, and what this step adds."""

    system: tuple[Mapping[str, Any], ...]
    conversation: list[Mapping[str, Any]]
    added: list[Mapping[str, Any]]

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return [*self.system, *self.conversation, *self.added]


def _turn(config: LlmConfig, ctx: ActionContext) -> _Turn:
    values = {"payload": ctx.payload, **ctx.values()}
    stored = ctx.data.get(config.conversation) or []
    if not isinstance(stored, list | tuple):
        raise ActionError(
            f"data {config.conversation!r} holds {type(stored).__name__}, not a message list",
            node_id=ctx.node_id,
        )
    conversation: list[Mapping[str, Any]] = [dict(m) for m in stored]
    system = (
        ({"role": "system", "content": render(config.system, values)},) if config.system else ()
    )
    added: list[Mapping[str, Any]] = []
    if config.prompt and _awaits_prompt(conversation):
        added.append({"role": "user", "content": render(config.prompt, values)})
    added += [{"role": "user", "content": message} for message in ctx.messages]
    return _Turn(system, conversation, added)


def _result(config: LlmConfig, turn: _Turn, completion: Completion) -> ActionResult:
    message = dict(completion.message)
    calls = message.get("tool_calls") or []
    outcome = "tool_calls" if calls else "answer"
    trigger = config.trigger(outcome)
    if trigger is None:
        raise ActionError(f"the model answered with {outcome}, which this binding does not expect")
    conversation = [*turn.conversation, *turn.added, message]
    turns = sum(1 for m in conversation if m.get("role") == "assistant")
    return ActionResult(
        trigger=trigger,
        data=frozen_map({config.conversation: conversation}),
        # The turn number keeps each step's payload distinct (loop detection hashes it).
        payload=frozen_map({"turn": turns, "tool_calls": len(calls)}),
        output=frozen_map(
            {
                "model": completion.model or config.model,
                "id": completion.id,
                "finish_reason": completion.finish_reason,
                "usage": dict(completion.usage),
            }
        ),
        spend=frozen_map({"tokens": completion.usage.get("total_tokens", 0)}),
    )


def build_llm_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Return the action that makes one chat-completion call.

    Args:
        definition: An ``llm:`` binding.
        base_dir: The graph file's folder (a ``with.llm.script`` is found beside it).
    """
    config = LlmConfig.of(definition.config)
    stored = stored_files()  # a run's stored definition: its scripts, not the files
    warm_up()  # ahead of the first turn

    async def call(ctx: ActionContext) -> ActionResult:
        turn = _turn(config, ctx)
        tools = list(await ctx.offer(config.tools)) if config.tools else []
        async with open_endpoint(ctx.settings, base_dir, stored) as endpoint:
            compressor = Compressor(config, endpoint)
            compressed = config.trigger("compressed")
            if compressed is not None and needs_compression(config, turn.messages, tools):
                return await compressor.compress(ctx, turn.conversation, compressed)
            request = ChatRequest(
                model=endpoint.model or config.model,
                messages=turn.messages,
                tools=tools,
                temperature=config.temperature,
                max_tokens=config.max_tokens,
                timeout=config.timeout,
                retries=config.retries,
                stream=config.stream,
            )
            try:
                completion = await complete(endpoint, request, _streamer(ctx, config))
            except ProviderError as exc:
                if not exc.context_length or compressed is None:
                    raise
                return await compressor.compress(ctx, turn.conversation, compressed)
        return _result(config, turn, completion)

    return call


def _streamer(ctx: ActionContext, config: LlmConfig) -> Any:
    if not config.stream:
        return None

    def delta(text: str) -> None:
        ctx.stream(DELTA_EVENT, {"text": text, "model": config.model, "hook": ctx.hook})

    return delta
