"""Companions of the ``model_plan`` machine: take a given plan, read a model's plan.

A plan is a list of items (or a mapping holding one) that a ``plan:`` binding turns
into child nodes; these actions only put it in the run's data, where the binding reads
it and checks it (:mod:`phasegraph.run._plans`). ``given_plan`` takes a plan the run's
input carries, so a run can be handed the plan instead of asking a model for it;
``read_plan`` reads the JSON a model answered with.

Settings (``with:``): ``plan_key``, the input and data key of the plan (default
``plan``); ``conversation``, the data key of the model's conversation (default
``conversation``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from phasegraph.actions import ActionContext, ActionResult

__all__ = ["given_plan", "read_plan"]

DEFAULT_PLAN_KEY: Final = "plan"
"""The input key a given plan is read from, and the data key a plan is written to."""

DEFAULT_CONVERSATION: Final = "conversation"
"""The data key of the conversation whose last answer ``read_plan`` reads."""

_FENCE: Final = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_QUOTED_CHARS: Final = 300  # how much of an unreadable answer the feedback quotes


def _plan_key(ctx: ActionContext) -> str:
    return str(ctx.settings.get("plan_key", DEFAULT_PLAN_KEY))


async def given_plan(ctx: ActionContext) -> ActionResult:
    """Take the plan the run's input carries (``given``), or ask for one (``ask``).

    ``ask`` carries an empty ``feedback``, so a prompt may always read
    ``{payload[feedback]}``: empty at first, why the last plan failed afterwards.
    """
    key = _plan_key(ctx)
    plan = ctx.input.get(key)
    if plan is None:
        return ActionResult(trigger="ask", payload={"feedback": ""})
    return ActionResult(trigger="given", data={key: plan}, output={"given": key})


async def read_plan(ctx: ActionContext) -> ActionResult:
    """Read the plan in the model's last answer (JSON, maybe fenced) into the run's data.

    ``unreadable`` carries ``feedback`` saying what was wrong, for the model's next try.
    """
    key = _plan_key(ctx)
    conversation = ctx.data.get(str(ctx.settings.get("conversation", DEFAULT_CONVERSATION)))
    answer = _last_answer(conversation)
    try:
        if answer is None:
            raise ValueError("no answer to read a plan from: answer with the plan as JSON")
        plan = _parsed(answer)
    except ValueError as exc:
        return ActionResult(trigger="unreadable", payload={"feedback": str(exc)})
    return ActionResult(trigger="planned", data={key: plan})


def _last_answer(conversation: Any) -> str | None:
    if not isinstance(conversation, Sequence) or isinstance(conversation, str):
        return None
    for message in reversed(conversation):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) and content.strip() else None
    return None


def _parsed(answer: str) -> Any:
    """The JSON value of an answer: the whole text, or the first fenced block in it."""
    fenced = _FENCE.search(answer)
    text = fenced.group(1) if fenced else answer
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        quoted = answer.strip()[:_QUOTED_CHARS]
        raise ValueError(
            f"the answer is not a JSON plan ({exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}); it began: {quoted!r}"
        ) from None
