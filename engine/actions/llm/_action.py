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
tools themselves; a refused tool is not shown. Before each request is sent, its most —
``max_tokens`` and the prompt's size, estimated high — is reserved against the run's
budget (a graph's ``budget:``, :mod:`phasegraph.run._spend`); a request that does not
fit fires ``budget_out`` when ``on_outcome`` maps it, and otherwise opens the run's
budget gate. Token usage (and its cost, for a model with a price) goes to the node's
``tokens`` and ``money`` counters (``ActionResult.spend``), so a ``tokens`` budget with
``spend_on: []`` can stop a node that used too many; ``prompt_tokens``,
``completion_tokens``, the model and the finish reason are in the step record's output,
and so is the prompt as sent: ``system`` (the rendered system message, which the
conversation does not hold) and ``prompt`` (the rendered prompt template, on the turn
that added it).

When the conversation nears ``context_tokens`` (80 % of it, counting about four
characters a token), or the provider refuses it as too long, the step compresses instead
of answering: :mod:`phasegraph.actions.llm._compress`, fired as ``compressed``.
"""

from __future__ import annotations

import json
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
from phasegraph.actions.llm._comply import Verdict, check_answer, request_format
from phasegraph.actions.llm._compress import Compressor, needs_compression
from phasegraph.actions.llm._config import BUDGET_OUT, LlmConfig
from phasegraph.actions.llm._endpoint import open_endpoint
from phasegraph.actions.llm._measure import UNBOUNDED_COMPLETION, most_prompt_tokens
from phasegraph.core._sources import current as stored_files
from phasegraph.errors import ActionError, SpendRefusedError
from phasegraph.model import ActionDef, frozen_map

__all__ = ["DELTA_EVENT", "build_llm_action"]

DELTA_EVENT: Final = "llm_delta"
"""The live (never committed) event carrying a piece of streamed text."""

TEXT_EVENT: Final = "llm_text"
"""The committed event of a streamed turn: its whole text, which its deltas are folded into."""


def _awaits_prompt(conversation: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the model is due a new prompt: nothing said yet, or it has answered."""
    return not conversation or conversation[-1].get("role") == "assistant"


@dataclass(frozen=True, slots=True)
class _Turn:
    """The messages of one request: what is kept, and what this step adds."""

    system: tuple[Mapping[str, Any], ...]
    conversation: list[Mapping[str, Any]]
    added: list[Mapping[str, Any]]
    prompt: str | None = None
    """The rendered ``prompt`` template, when this step added it."""

    def sent(self) -> dict[str, str]:
        """What the templates rendered to, for the turn's record.

        The system message (never in the conversation) and the prompt (the user message
        it became).
        """
        sent = {"system": str(self.system[0]["content"])} if self.system else {}
        if self.prompt is not None:
            sent["prompt"] = self.prompt
        return sent

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
    prompt = None
    if config.prompt and _awaits_prompt(conversation):
        prompt = render(config.prompt, values)
        added.append({"role": "user", "content": prompt})
    added += [{"role": "user", "content": message} for message in ctx.messages]
    return _Turn(system, conversation, added, prompt)


@dataclass(slots=True)
class _Answers:
    """The answers of one step: refused ones (each with why) before the one kept."""

    refused: list[Mapping[str, Any]]
    misfits: list[str]
    usage: dict[str, int]
    spent: dict[str, int]
    """What the answers cost, by budget (``tokens``, ``money`` in millionths)."""

    def add(self, ctx: ActionContext, models: Sequence[str], completion: Completion) -> None:
        for key, count in completion.usage.items():
            self.usage[key] = self.usage.get(key, 0) + int(count)
        usage = completion.usage
        prompt = int(usage.get("prompt_tokens", 0))
        answer = int(usage.get("completion_tokens", 0))
        if not prompt and not answer:
            prompt = int(usage.get("total_tokens", 0))
        for kind, units in ctx.price(models, prompt, answer).items():
            self.spent[kind] = self.spent.get(kind, 0) + int(units)


def _controls(config: LlmConfig) -> dict[str, Any]:
    """The turn controls the binding sent, for the turn's record."""
    controls: dict[str, Any] = {}
    if config.tool_choice is not None:
        controls["tool_choice"] = config.tool_choice
    if config.parallel_tool_calls is not None:
        controls["parallel_tool_calls"] = config.parallel_tool_calls
    if config.response_format is not None:
        controls["response_format"] = str(config.response_format["name"])
    return controls


def _result(
    config: LlmConfig, turn: _Turn, completion: Completion, answers: _Answers, verdict: Verdict
) -> ActionResult:
    message = dict(completion.message)
    calls = message.get("tool_calls") or []
    outcome = "tool_calls" if calls else "answer"
    trigger = config.trigger(outcome)
    if trigger is None:
        raise ActionError(f"the model answered with {outcome}, which this binding does not expect")
    conversation = [*turn.conversation, *turn.added, *answers.refused, message]
    turns = sum(1 for m in conversation if m.get("role") == "assistant")
    # The turn number keeps each step's payload distinct (loop detection hashes it).
    payload: dict[str, Any] = {"turn": turns, "tool_calls": len(calls)}
    if verdict.structured is not None:
        payload["structured"] = verdict.structured
    if message.get("refusal"):
        payload["refusal"] = message["refusal"]
    output: dict[str, Any] = {
        "model": completion.model or config.model,
        "id": completion.id,
        "finish_reason": completion.finish_reason,
        "usage": answers.usage,
        **turn.sent(),
        **_controls(config),
    }
    if answers.misfits:
        output["refused_answers"] = answers.misfits
    return ActionResult(
        trigger=trigger,
        data=frozen_map({config.conversation: conversation}),
        payload=frozen_map(payload),
        output=frozen_map(output),
        spend=frozen_map(answers.spent or {"tokens": 0}),
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
            answers = _Answers([], [], {}, {})
            for attempt in range(config.attempts):
                request = ChatRequest(
                    model=endpoint.model or config.model,
                    messages=[*turn.messages, *answers.refused],
                    tools=tools,
                    temperature=config.temperature,
                    max_tokens=config.max_tokens,
                    timeout=config.timeout,
                    retries=config.retries,
                    stream=config.stream,
                    tool_choice=config.tool_choice if tools else None,
                    parallel_tool_calls=config.parallel_tool_calls if tools else None,
                    response_format=request_format(config),
                )
                models = (request.model, config.model)
                try:
                    await _reserve(ctx, config, request, models, answers.spent)
                except SpendRefusedError as exc:
                    return _budget_out(config, exc, answers)
                try:
                    completion = await complete(endpoint, request, _streamer(ctx, config))
                except ProviderError as exc:
                    if not exc.context_length or compressed is None or attempt:
                        raise
                    return await compressor.compress(ctx, turn.conversation, compressed)
                answers.add(ctx, models, completion)
                verdict = check_answer(config, completion.message)
                if verdict.misfit is None:
                    if config.stream:
                        _fold(ctx, config, completion)
                    return _result(config, turn, completion, answers, verdict)
                # Shown to the model with why, and asked again.
                answers.misfits.append(verdict.misfit)
                answers.refused += [dict(completion.message), *_told(completion, verdict.misfit)]
        raise ActionError(
            f"model {config.model!r} answered {config.attempts} times without complying "
            f"with the binding: {answers.misfits[-1]}",
            node_id=ctx.node_id,
        )

    return call


async def _reserve(
    ctx: ActionContext,
    config: LlmConfig,
    request: ChatRequest,
    models: Sequence[str],
    used: Mapping[str, int],
) -> None:
    """Reserve the request's most against the run's budget before it is sent."""
    if not ctx.spend_limited:  # the prompt is measured only when something is limited
        return
    prompt = most_prompt_tokens(request.messages, request.tools)
    await ctx.reserve(models, prompt, config.max_tokens or UNBOUNDED_COMPLETION, used)


def _budget_out(config: LlmConfig, refused: SpendRefusedError, answers: _Answers) -> ActionResult:
    """The binding's ``budget_out`` trigger, or the refusal raised (the run's gate opens).

    Raises:
        SpendRefusedError: The binding maps no ``budget_out`` trigger.
    """
    trigger = config.on_outcome.get(BUDGET_OUT)
    if trigger is None:
        raise refused
    payload = {"asked": refused.asked, "left": refused.left, "message": refused.message}
    return ActionResult(
        trigger=trigger,
        payload=frozen_map(payload),
        output=frozen_map({"usage": answers.usage}),
        spend=frozen_map(answers.spent),
    )


def _told(completion: Completion, misfit: str) -> list[Mapping[str, Any]]:
    """What the model is told of its refused answer.

    Its calls are answered, not run: a call left unanswered would make the next request
    invalid.
    """
    calls = completion.message.get("tool_calls") or []
    result = json.dumps({"error": "not_run", "message": misfit}, sort_keys=True)
    told: list[Mapping[str, Any]] = [
        {"role": "tool", "tool_call_id": str(call.get("id", "")), "content": result}
        for call in calls
    ]
    return told or [{"role": "user", "content": misfit}]


def _fold(ctx: ActionContext, config: LlmConfig, completion: Completion) -> None:
    """Commit the streamed turn's text with its step.

    A stream resumed after the step reads the text there, its deltas gone.
    """
    text = completion.message.get("content")
    if isinstance(text, str) and text:
        ctx.emit(TEXT_EVENT, {"text": text, "model": config.model, "hook": ctx.hook})


def _streamer(ctx: ActionContext, config: LlmConfig) -> Any:
    if not config.stream:
        return None

    def delta(text: str) -> None:
        ctx.stream(DELTA_EVENT, {"text": text, "model": config.model, "hook": ctx.hook})

    return delta
