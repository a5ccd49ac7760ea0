"""What a binding declares about its side effects: its kind, its policy, its reconciler.

A binding's ``effect:`` (python, shell and http actions) says what running its action
again does (:class:`~phasegraph.model.Effect`); without one, an ``http:`` POST or PATCH
is ``once`` and every other action ``idempotent``: it runs again after a crash, with the
same effect id, as every step always has. A ``tools:`` binding takes each call's kind
from its tool. ``on_unknown:`` says what a resume does with a ``once`` effect whose
intent has no committed result (:class:`~phasegraph.model.OnUnknown`), and
``reconcile: module:function`` names the function that looks such an effect up.

A reconciler is called as ``reconcile(ctx, entry)`` (sync or async) with the action's
context and the uncertain :class:`~phasegraph.model.LedgerEntry`. It returns ``None``
when the effect did not happen (it then runs again, with the same effect id), or what
the effect gave: for a tool call, the call's result (a mapping); for an action, what the
action would have returned (a trigger name, a mapping with ``trigger``, or an
:class:`~phasegraph.actions.ActionResult`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from phasegraph.actions._base import ActionContext, effect_of
from phasegraph.actions._python import import_bound
from phasegraph.model import ActionDef, Effect, LedgerEntry, OnUnknown

__all__ = ["ACTION_INDEX", "EffectPolicy", "Reconciler", "effect_policy"]

ACTION_INDEX: Final = -1
"""The ledger index of an action's own effect (a tool call's index is its position)."""

_ONCE_METHODS: Final = frozenset({"POST", "PATCH"})

Reconciler = Callable[[ActionContext, LedgerEntry], Awaitable[Any]]
"""Looks an uncertain effect up: ``None`` if it did not happen, else what it gave."""


@dataclass(frozen=True, slots=True)
class EffectPolicy:
    """A binding's declared effect, and what a resume does when its outcome is unknown.

    Attributes:
        effect: The action's own effect kind (a ``tools:`` binding's calls take theirs
            from each tool).
        on_unknown: The policy for a ``once`` effect whose intent has no result.
        reconcile: The reconciler, when ``on_unknown`` is ``reconcile``.
    """

    effect: Effect = Effect.IDEMPOTENT
    on_unknown: OnUnknown = OnUnknown.ASK
    reconcile: Reconciler | None = None


def _default_effect(definition: ActionDef) -> Effect:
    if definition.kind == "http":
        request = definition.config.get("http") or {}
        method = str(request.get("method", "GET")).upper()
        return Effect.ONCE if method in _ONCE_METHODS else Effect.IDEMPOTENT
    return Effect.IDEMPOTENT


def _reconciler(target: str, definition: ActionDef, base_dir: Path | None) -> Reconciler:
    function = import_bound(target, definition, base_dir, "reconciler")

    async def reconcile(ctx: ActionContext, entry: LedgerEntry) -> Any:
        if inspect.iscoroutinefunction(function):
            return await function(ctx, entry)
        return await asyncio.to_thread(function, ctx, entry)

    return reconcile


def effect_policy(
    definition: ActionDef, base_dir: Path | None = None, action: object = None
) -> EffectPolicy:
    """The effect policy a binding declares (defaults filled in).

    Args:
        definition: The binding.
        base_dir: The graph file's folder (a ``reconcile:`` module may live beside it).
        action: The built action: what its function declared (``declare_effect``) counts
            when the binding names no ``effect:``.

    Raises:
        SpecError: The reconciler cannot be imported.
    """
    config: Mapping[str, Any] = definition.config
    declared = config.get("effect")
    target = config.get("reconcile")
    if declared is None:
        declared = effect_of(action, _default_effect(definition))
    return EffectPolicy(
        effect=Effect(declared),
        on_unknown=OnUnknown(config.get("on_unknown", OnUnknown.ASK)),
        reconcile=None if target is None else _reconciler(str(target), definition, base_dir),
    )
