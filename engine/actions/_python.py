"""``python:`` actions: call ``module:function`` (async, or sync in a worker thread).

A binding's ``timeout`` is a deadline for the whole call. An async function is cancelled
at the deadline. A sync function runs in a daemon thread of its own, and the node fails at
the deadline all the same; the thread cannot be killed, so it runs on until the function
returns, its late result discarded (being a daemon, it does not keep the process alive).
With ``thread: false`` the function blocks the event loop and cannot be interrupted: the
deadline is checked when it returns, and a late result is discarded likewise. Either way
the action raises :class:`~phasegraph.errors.ActionTimeoutError`, which the ``error``
trigger classifies as ``timeout`` (retryable: a fallback chain retries it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from phasegraph.actions._base import (
    Action,
    ActionContext,
    ActionResult,
    carry_effect,
    carry_writes,
)
from phasegraph.errors import ActionError, ActionTimeoutError, Problem, SpecError
from phasegraph.model import ActionDef, frozen_map

__all__ = ["build_python_action", "coerce_result", "import_bound"]


def import_bound(
    target: str, definition: ActionDef, base_dir: Path | None, what: str
) -> Callable[..., Any]:
    """Import a binding's ``module:function`` (``what`` names it in the error).

    Raises:
        SpecError: It cannot be imported; names the binding's location.
    """
    try:
        return _import_target(target, base_dir)
    except Exception as exc:  # any import-time failure is a definition problem
        raise SpecError(
            [Problem(f"cannot import {what} {target!r}: {exc}", definition.location)]
        ) from exc


def _import_target(target: str, base_dir: Path | None) -> Callable[..., Any]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        module = _import_beside_graph(module_name, base_dir, exc)
    function = getattr(module, attr, None)
    if not callable(function):
        raise ImportError(f"module {module_name!r} has no callable {attr!r}")
    return function  # type: ignore[no-any-return]


def _import_beside_graph(module_name: str, base_dir: Path | None, error: Exception) -> Any:
    """Import ``module_name`` from the graph file's folder, so graphs can ship their code."""
    candidate = (
        None if base_dir is None else base_dir.joinpath(*module_name.split(".")).with_suffix(".py")
    )
    if candidate is None or not candidate.is_file():
        raise error
    digest = hashlib.sha256(str(candidate).encode()).hexdigest()[:12]
    unique = f"phasegraph_user_{digest}_{module_name.replace('.', '_')}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, candidate)
    if spec is None or spec.loader is None:
        raise error
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module


def coerce_result(value: Any, where: str) -> ActionResult:
    """Accept an :class:`ActionResult`, a trigger string or a ``{"trigger": ...}`` mapping.

    Raises:
        ActionError: ``value`` is none of those.
    """
    if isinstance(value, ActionResult):
        return value
    if isinstance(value, str):
        return ActionResult(trigger=value)
    if isinstance(value, Mapping) and isinstance(value.get("trigger"), str):
        unknown = set(value) - {"trigger", "data", "payload", "output"}
        if not unknown:
            return ActionResult(
                trigger=value["trigger"],
                data=frozen_map(value.get("data")),
                payload=frozen_map(value.get("payload")),
                output=frozen_map(value.get("output")),
            )
    raise ActionError(
        f"{where} returned {type(value).__name__} {value!r:.80}; expected a trigger name, "
        "an ActionResult or a mapping with 'trigger' (and optional 'data', 'payload', 'output')"
    )


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up (deadline or cancellation): drop the late result
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


async def _in_thread(function: Callable[[ActionContext], Any], ctx: ActionContext) -> Any:
    """Call ``function`` in a daemon thread; abandoning the await abandons the thread.

    Unlike ``asyncio.to_thread``, a call still running when its node gave up on it holds
    no pooled worker and does not delay the process's exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        value, error = None, None
        try:
            value = context.run(function, ctx)
        except BaseException as exc:  # handed to the awaiting task, which re-raises it
            error = exc
        # The loop may be closed by now (the process is ending): nobody waits any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, value, error)

    threading.Thread(
        target=work, name=f"phasegraph:{ctx.run_id}:{ctx.node_id}", daemon=True
    ).start()
    return await future


def _timed_out(ctx: ActionContext, limit: float) -> ActionTimeoutError:
    return ActionTimeoutError(
        f"action of node {ctx.node_id!r} ran past its timeout of {limit:g} s",
        run_id=ctx.run_id,
        node_id=ctx.node_id,
    )


async def _within(
    limit: float, call: Callable[[ActionContext], Awaitable[Any]], ctx: ActionContext
) -> Any:
    """Await ``call(ctx)``, cancelled at the deadline (a ``TimeoutError`` of its own passes)."""
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await call(ctx)
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        raise _timed_out(ctx, limit) from exc


def _blocking(
    function: Callable[[ActionContext], Any], limit: float | None
) -> Callable[[ActionContext], Awaitable[Any]]:
    """Call ``function`` on the event loop; past ``limit``, its result is discarded."""

    async def call(ctx: ActionContext) -> Any:
        loop = asyncio.get_running_loop()
        started = loop.time()
        value = function(ctx)
        if limit is not None and loop.time() - started > limit:
            raise _timed_out(ctx, limit)
        return value

    return call


def build_python_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Import the target once and return the action that calls it.

    Raises:
        SpecError: The target cannot be imported (names the binding's location).
    """
    target = str(definition.config["python"])
    function = import_bound(target, definition, base_dir, "python action")
    limit = definition.config.get("timeout")
    invoke: Callable[[ActionContext], Awaitable[Any]]
    if inspect.iscoroutinefunction(function):
        invoke = function
    elif definition.config.get("thread", True):
        invoke = functools.partial(_in_thread, function)
    else:
        invoke = _blocking(function, limit)
        limit = None  # nothing can interrupt it: _blocking checks the deadline afterwards

    call = _PythonCall(invoke, limit, f"python action {target!r}")
    return carry_effect(function, carry_writes(function, call))


class _PythonCall:
    """The action of a ``python:`` binding: calls ``invoke`` and reads what it returns.

    An object rather than a closure: a closure over these three names is five objects
    for the garbage collector to walk (the function, its tuple of cells, a cell each),
    this is one, and a graph of 20,000 nodes keeps one per binding. ``__dict__`` holds
    what the bound function declared (:func:`~phasegraph.actions._base.carry_effect`).
    """

    __slots__ = ("__dict__", "invoke", "limit", "where")

    def __init__(
        self, invoke: Callable[[ActionContext], Awaitable[Any]], limit: Any, where: str
    ) -> None:
        self.invoke = invoke
        self.limit = limit
        self.where = where

    async def __call__(self, ctx: ActionContext) -> ActionResult:
        limit, invoke = self.limit, self.invoke
        value = await (invoke(ctx) if limit is None else _within(float(limit), invoke, ctx))
        if type(value) is ActionResult:  # the usual result, as coerce_result would take it
            return value
        return coerce_result(value, self.where)
