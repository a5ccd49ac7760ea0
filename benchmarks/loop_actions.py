"""Actions for the benchmark graphs."""

from __future__ import annotations

import asyncio

from phasegraph.actions import ActionContext, ActionResult

_AGAIN = ActionResult(trigger="again")
_STOP = ActionResult(trigger="stop")


async def work(ctx: ActionContext) -> ActionResult:
    """Loop until the run input's ``steps`` iterations are done."""
    return _AGAIN if ctx.counters.get("steps", 0) < ctx.input["steps"] else _STOP


_OK = ActionResult(trigger="ok")


async def ok(ctx: ActionContext) -> ActionResult:
    """Do nothing and succeed: a DAG node whose cost is the engine's alone."""
    return _OK


_WORDS = (
    *("the", "model", "reads", "a", "file", "runs", "the", "tests", "and", "writes"),
    *("a", "short", "plan", "before", "it", "edits"),
)


def _message(turn: int, size: int) -> dict[str, str]:
    """A chat message of about ``size`` bytes of text, the same for the same turn."""
    words: list[str] = []
    length, index = 0, turn
    while length < size:
        word = _WORDS[index % len(_WORDS)] + str(index % 97)
        words.append(word)
        length += len(word) + 1
        index = index * 31 + 7
    return {"role": "assistant" if turn % 2 else "user", "content": " ".join(words)[:size]}


async def converse(ctx: ActionContext) -> ActionResult:
    """Append one message to the ``conversation`` list until it has ``turns`` of them.

    Returns the list it was given with the new message appended, as a model step does.
    """
    conversation = ctx.data.get("conversation", [])
    turn = len(conversation)
    if turn >= ctx.input["turns"]:
        return _STOP
    message = _message(turn, ctx.input["size"])
    return ActionResult(trigger="again", data={"conversation": [*conversation, message]})


async def nap(ctx: ActionContext) -> ActionResult:
    """``work`` that first sleeps the run input's ``nap`` seconds (a step that takes time)."""
    await asyncio.sleep(float(ctx.input.get("nap", 0)))
    return await work(ctx)
