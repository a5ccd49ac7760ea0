"""``tools:`` actions: dispatch the tool calls of the conversation's last assistant message.

``tools: KEY`` names the conversation (a data key). Each call goes through ``ctx.tool``,
so the node's rules apply: a call the phase refuses is not run, and the model reads the
structured ``phase_violation`` result instead (the loop goes on). The rules come before
the ledger: only a call that passed them commits anything (a ``once`` call's intent as
it starts, its result as it ends). A result is appended as
a ``tool`` message answering its call. Arguments that are not a JSON object, an unknown
tool or arguments the tool does not take come back to the model as an error result too:
the model made the mistake, so the model is told.

With the ``loop_detection`` middleware, a call repeated too often gets a warning: the
corrective message is injected into the conversation (a user message after the results);
a repeat after a warning raises the loop error. A successful ``advance`` call fires
``advance`` instead of ``observed`` (``on_outcome`` renames them; ``advance: null``
answers such a call without ending the loop, for a state that takes no ``advance``).

``cwd: TEMPLATE`` (e.g. ``{repo}``) makes every call work in that folder: the model's
relative paths resolve there and no call may leave it (the tools' ``cwd`` argument).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from phasegraph.actions._base import (
    CALL_EFFECT_ID,
    CALL_STARTING,
    Action,
    ActionContext,
    ActionResult,
)
from phasegraph.actions._effects import EffectPolicy, effect_policy
from phasegraph.actions._shell import render
from phasegraph.errors import ActionError, LoopDetectedError
from phasegraph.model import ActionDef, Effect, LedgerEntry, frozen_map, replace

__all__ = ["ADVANCE_TRIGGER", "OBSERVED_TRIGGER", "build_tools_action"]

OBSERVED_TRIGGER: Final = "observed"
ADVANCE_TRIGGER: Final = "advance"
_ADVANCE_TOOL: Final = "advance"
_WARNING_KEY: Final = "loop_warning"


def _arguments(call: Mapping[str, Any]) -> tuple[str, dict[str, Any] | str]:
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    text = function.get("arguments") or "{}"
    try:
        arguments = json.loads(text) if isinstance(text, str) else text
    except ValueError as exc:
        return name, f"the arguments are not JSON: {exc}"
    if not isinstance(arguments, dict):
        return name, "the arguments must be a JSON object"
    return name, arguments


async def _dispatch(
    ctx: ActionContext,
    name: str,
    arguments: dict[str, Any] | str,
    cwd: str | None,
    effect_id: str,
    starting: Callable[[], Awaitable[None]],
) -> dict[str, Any]:
    if isinstance(arguments, str):
        return {"error": "bad_arguments", "message": arguments}
    if cwd is not None:
        arguments = {**arguments, "cwd": cwd}
    token, begun = CALL_EFFECT_ID.set(effect_id), CALL_STARTING.set(starting)
    try:
        return dict(await ctx.tool(name, **arguments))
    except LoopDetectedError:
        raise
    except ActionError as exc:  # unknown tool, arguments it does not take
        return {"error": "bad_call", "message": exc.message}
    finally:
        CALL_STARTING.reset(begun)
        CALL_EFFECT_ID.reset(token)


async def _ledgered(
    ctx: ActionContext,
    index: int,
    tool_call: Mapping[str, Any],
    cwd: str | None,
    policy: EffectPolicy,
) -> tuple[str, dict[str, Any]]:
    """Run one call at most as its kind allows, its result committed before the next call.

    Returns the tool's name and the call's result.

    A call whose result an earlier attempt committed is not run again: its result is
    reused. An intent without a result is here only under ``retry`` or after a
    ``run_again`` answer (it runs again, with the same effect id, its intent committed
    again first) or ``reconcile`` (the reconciler says whether it happened).
    """
    effect_id = f"{ctx.effect_id}:{index}"
    # By index, not id: a fork's ledger holds its parent's entries, under the parent's ids.
    done = next((e for e in ctx.ledger if e.index == index), None)
    name, arguments = _arguments(tool_call)
    if done is not None and done.result is not None:
        return name, dict(done.result)
    effect = ctx.tool_effect(name)
    entry = LedgerEntry(
        id=effect_id,
        index=index,
        tool=name,
        arguments=frozen_map(arguments if isinstance(arguments, dict) else {}),
        effect=effect,
        on_unknown=policy.on_unknown,
    )
    found: Any = None
    started = False

    async def starting() -> None:
        # The call passed the phase rules and the tool's checks and runs now. A once
        # call's intent is committed here (again before a re-run, under the binding's
        # policy): a crash from here on leaves it uncertain, and asks again.
        nonlocal started
        started = True
        if effect is Effect.ONCE:
            await ctx.record_effect(entry)

    if done is not None and policy.reconcile is not None:
        found = await policy.reconcile(ctx, done)
    if found is None:
        result = await _dispatch(ctx, name, arguments, cwd, effect_id, starting)
        if not started:  # refused before it ran: nothing happened, nothing to commit
            return name, result
    elif isinstance(found, Mapping):
        result = dict(found)
    else:
        raise ActionError(
            f"the reconciler of tool call {name!r} returned {type(found).__name__}: "
            "expected the call's result (a mapping) or None (it did not happen)",
            node_id=ctx.node_id,
        )
    await ctx.record_effect(replace(entry, result=frozen_map(result)))
    return name, result


def _last_calls(ctx: ActionContext, key: str) -> tuple[list[Any], list[Mapping[str, Any]]]:
    conversation = list(ctx.data.get(key) or [])
    last = conversation[-1] if conversation else {}
    calls = last.get("tool_calls") if isinstance(last, Mapping) else None
    if not calls or last.get("role") != "assistant":
        raise ActionError(
            f"the last message of {key!r} is not an assistant message with tool calls: "
            "bind the tools action after an llm action that fired tool_calls",
            node_id=ctx.node_id,
        )
    return conversation, list(calls)


def build_tools_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Return the action that runs the model's tool calls, each committed as it completes.

    Args:
        definition: A ``tools:`` binding; ``tools`` is the conversation's data key.
        base_dir: The graph file's folder (a ``reconcile:`` module may live beside it).
    """
    key = str(definition.config["tools"])
    folder = definition.config.get("cwd")
    renamed = dict(definition.config.get("on_outcome") or {})
    observed = renamed.get(OBSERVED_TRIGGER, OBSERVED_TRIGGER) or OBSERVED_TRIGGER
    advancing = renamed.get(ADVANCE_TRIGGER, ADVANCE_TRIGGER)
    policy = effect_policy(definition, base_dir)

    async def call(ctx: ActionContext) -> ActionResult:
        conversation, calls = _last_calls(ctx, key)
        cwd = None if folder is None else render(str(folder), ctx.values())
        results: list[Mapping[str, Any]] = []
        warnings: list[str] = []
        advance = False
        for index, tool_call in enumerate(calls):
            name, result = await _ledgered(ctx, index, tool_call, cwd, policy)
            warning = result.pop(_WARNING_KEY, None)
            if warning:
                warnings.append(str(warning))
            advance = advance or (name == _ADVANCE_TOOL and result.get("advance") is True)
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": str(tool_call.get("id", "")),
                    "content": json.dumps(result, sort_keys=True, default=str),
                }
            )
        corrective = [{"role": "user", "content": text} for text in warnings]
        updated = [*conversation, *results, *corrective]
        refused = sum(1 for r in results if '"error": "phase_violation"' in str(r["content"]))
        return ActionResult(
            trigger=advancing if advance and advancing is not None else observed,
            data=frozen_map({key: updated}),
            payload=frozen_map({"calls": len(calls), "refused": refused, "at": len(updated)}),
        )

    return call
