"""Middleware: an onion of small callables wrapped around every action call.

Each middleware is ``async (ctx, call_next) -> ActionResult``. The chain is built once per
run from an ordered tuple: the first middleware is outermost, so ``before`` code runs
outside-in and ``after`` code inside-out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from phasegraph.actions import Action, ActionContext, ActionResult, CallNext
from phasegraph.errors import Problem, SpecError
from phasegraph.model import MiddlewareDef

__all__ = ["MIDDLEWARE", "Audit", "Middleware", "Timing", "build_middleware", "chain"]


class Middleware(Protocol):
    """One layer of the onion."""

    def __call__(self, ctx: ActionContext, call_next: CallNext) -> Any:
        """Run around ``call_next(ctx)`` and return its (possibly changed) result."""
        ...


def chain(middleware: Sequence[Middleware], action: Action) -> Action:
    """Wrap ``action`` so that ``middleware[0]`` is the outermost layer."""
    wrapped: CallNext = action
    for layer in reversed(middleware):
        wrapped = _bind(layer, wrapped)
    return wrapped


def _bind(layer: Middleware, inner: CallNext) -> CallNext:
    async def call(ctx: ActionContext) -> ActionResult:
        result: ActionResult = await layer(ctx, inner)
        return result

    return call


class Timing:
    """Adds the action's wall time, in milliseconds, to the step record's output."""

    def __init__(self, **_: Any) -> None:
        pass

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Time the rest of the chain."""
        started = time.perf_counter()
        result = await call_next(ctx)
        elapsed = round((time.perf_counter() - started) * 1000, 3)
        return _with_output(result, duration_ms=elapsed)


class Audit:
    """Records an ``action_called`` event with the hook, state and returned trigger."""

    def __init__(self, **_: Any) -> None:
        pass

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Record what the rest of the chain returned."""
        result = await call_next(ctx)
        ctx.emit("action_called", {"hook": ctx.hook, "state": ctx.state, "trigger": result.trigger})
        return result


def _with_output(result: ActionResult, **extra: Any) -> ActionResult:
    return ActionResult(
        trigger=result.trigger,
        data=result.data,
        payload=result.payload,
        output=MappingProxyType({**result.output, **extra}),
    )


MIDDLEWARE: Mapping[str, Callable[..., Middleware]] = MappingProxyType(
    {"timing": Timing, "audit": Audit}
)
"""Built-in middleware by the name graphs use."""


def build_middleware(definitions: Sequence[MiddlewareDef]) -> tuple[Middleware, ...]:
    """Instantiate a graph's middleware, outermost first.

    Raises:
        SpecError: An unknown name or bad settings (every problem at once).
    """
    built: list[Middleware] = []
    problems: list[Problem] = []
    for definition in definitions:
        factory = MIDDLEWARE.get(definition.name)
        if factory is None:
            known = ", ".join(sorted(MIDDLEWARE))
            problems.append(
                Problem(
                    f"unknown middleware {definition.name!r} (known: {known})", definition.location
                )
            )
            continue
        try:
            built.append(factory(**definition.config))
        except TypeError as exc:
            problems.append(Problem(f"middleware {definition.name!r}: {exc}", definition.location))
    if problems:
        raise SpecError(problems)
    return tuple(built)
