"""Helpers for the concern tests: graphs on the built-in machines, scripted actions, runs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from builders import engine, graph, prepared
from phasegraph.actions import ActionContext, ActionResult
from phasegraph.model import (
    GraphDef,
    MiddlewareDef,
    NodeDef,
    RunState,
    StepRecord,
    frozen_map,
    replace,
)
from phasegraph.spec import load_machine
from phasegraph.store.memory import MemoryStore

CONCERN_MACHINES = ("fallback_chain", "quality_loop")


@functools.cache
def _concern_machines() -> tuple[Any, ...]:
    """The built-in concern machines, loaded once (definitions are frozen)."""
    return tuple(load_machine(name) for name in CONCERN_MACHINES)


def concern_graph(
    nodes: Sequence[NodeDef],
    *,
    middleware: Sequence[tuple[str, Mapping[str, Any]]] = (),
    extra_machines: Iterable[Any] = (),
) -> GraphDef:
    """A graph whose nodes may use the built-in concern machines (and task/loop)."""
    machines = [*_concern_machines(), *extra_machines]
    definition = graph(list(nodes), machines=machines)
    layers = tuple(MiddlewareDef(name=n, config=frozen_map(c)) for n, c in middleware)
    return replace(definition, middleware=layers)


def node(
    node_id: str,
    machine: str,
    *,
    needs: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
) -> NodeDef:
    """A node definition (bindings come from in-code actions)."""
    return NodeDef(id=node_id, machine=machine, needs=tuple(needs), settings=frozen_map(settings))


async def run_graph(
    definition: GraphDef,
    actions: Mapping[tuple[str, str], Any],
    run_input: Mapping[str, Any] | None = None,
) -> tuple[RunState, list[StepRecord]]:
    """Run to the end on a memory store; the final state and the whole history."""
    async with MemoryStore() as store:
        eng = engine(store)
        state = await eng.run(prepared(definition, actions), run_input)
        return state, await eng.history(state.run_id)


def script(
    steps: Sequence[Any], calls: list[ActionContext] | None = None
) -> Callable[[ActionContext], Any]:
    """An action answering from ``steps`` in turn (the last one repeats).

    A step is a trigger name, an :class:`ActionResult`, or an exception to raise.
    """
    seen = [] if calls is None else calls

    async def action(ctx: ActionContext) -> ActionResult:
        seen.append(ctx)
        step = steps[min(len(seen), len(steps)) - 1]
        if isinstance(step, BaseException):
            raise step
        return step if isinstance(step, ActionResult) else ActionResult(trigger=step)

    return action


def path_trail(history: Sequence[StepRecord], node_id: str) -> list[str]:
    """The states a node entered, in order (``parent/child`` for nested states)."""
    return ["/".join(r.dest) for r in history if r.node == node_id and r.dest]


def events_of(history: Sequence[StepRecord], kind: str) -> list[Mapping[str, Any]]:
    """Every committed event of one kind."""
    return [e for r in history for e in r.events if e.get("kind") == kind]
