"""Middleware of your own, composed with the public ``chain`` as a user would."""

from __future__ import annotations

import pytest

from phasegraph import ActionContext, ActionResult, Engine, RunStatus, load_graph
from phasegraph.actions import CallNext
from phasegraph.errors import SpecError
from phasegraph.run import Middleware, chain, prepare
from phasegraph.run._middleware import build_middleware
from phasegraph.spec import load_graph_text
from phasegraph.store.memory import MemoryStore


def signing(name: str, seen: list[str]) -> Middleware:
    """A middleware that notes when it runs and signs the greeting the action returns."""

    async def middleware(ctx: ActionContext, call_next: CallNext) -> ActionResult:
        seen.append(f"{name} before")
        result = await call_next(ctx)
        seen.append(f"{name} after")
        signed = f"{result.data['greeting']} ({name})"
        return ActionResult(trigger=result.trigger, data={**result.data, "greeting": signed})

    return middleware


async def test_two_middlewares_wrap_a_bound_action_outermost_first() -> None:
    seen: list[str] = []

    async def plan(ctx: ActionContext) -> ActionResult:
        seen.append("action")
        return ActionResult(trigger="ok", data={"greeting": f"Hello, {ctx.input['who']}"})

    action = chain((signing("outer", seen), signing("inner", seen)), plan)
    graph = prepare(load_graph("hello"), "hello", actions={("plan", "run"): action})
    async with MemoryStore() as store:
        state = await Engine(store).run(graph, {"who": "Ada"})

    assert state.status is RunStatus.COMPLETED
    assert seen == ["outer before", "inner before", "action", "inner after", "outer after"]
    # The inner layer changed the result first; the next node saw both changes.
    assert state.data["greeting"] == "Hello, Ada (inner) (outer)"
    assert state.data["shouted"] == "Hello, Ada (inner) (outer)!"


async def test_no_middleware_leaves_the_action_alone() -> None:
    async def plan(ctx: ActionContext) -> ActionResult:
        return ActionResult(trigger="ok", data={"greeting": "plain"})

    graph = prepare(load_graph("hello"), "hello", actions={("plan", "run"): chain((), plan)})
    async with MemoryStore() as store:
        state = await Engine(store).run(graph, {"who": "Ada"})
    assert state.data["shouted"] == "plain!"


def test_a_misspelt_middleware_setting_is_named_with_a_suggestion() -> None:
    text = (
        "graph: mw\nmiddleware:\n  - loop_detection: {treshold: 2}\n"
        "nodes:\n  - {id: a, machine: task, bind: {run: {shell: 'true'}}}\n"
    )
    definition = load_graph_text(text, name="mw.yaml")
    with pytest.raises(SpecError) as caught:
        build_middleware(definition.middleware)
    [problem] = caught.value.problems
    assert problem.message == (
        "middleware 'loop_detection': unknown setting 'treshold'; did you mean 'threshold'? "
        "(settings: window, threshold, reset_on)"
    )
    assert problem.location is not None
    assert problem.location.line == 3
