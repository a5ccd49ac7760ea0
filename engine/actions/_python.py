"""``python:`` actions: call ``module:function`` (async, or sync in a worker thread)."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phasegraph.actions._base import Action, ActionContext, ActionResult
from phasegraph.errors import ActionError, Problem, SpecError
from phasegraph.model import ActionDef, frozen_map

__all__ = ["build_python_action", "coerce_result"]


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


def build_python_action(definition: ActionDef, base_dir: Path | None) -> Action:
    """Import the target once and return the action that calls it.

    Raises:
        SpecError: The target cannot be imported (names the binding's location).
    """
    target = str(definition.config["python"])
    try:
        function = _import_target(target, base_dir)
    except Exception as exc:  # any import-time failure is a definition problem
        raise SpecError(
            [Problem(f"cannot import python action {target!r}: {exc}", definition.location)]
        ) from exc
    is_async = inspect.iscoroutinefunction(function)
    in_thread = bool(definition.config.get("thread", True))

    async def call(ctx: ActionContext) -> ActionResult:
        if is_async:
            value = await function(ctx)
        elif in_thread:
            value = await asyncio.to_thread(function, ctx)
        else:
            value = function(ctx)
        return coerce_result(value, f"python action {target!r}")

    return call
