"""Companion of the ``spec_review`` machine: check a generated spec before review."""

from __future__ import annotations

from collections.abc import Mapping

from phasegraph.actions import ActionContext, ActionResult

__all__ = [
    "check_spec",
]

DEFAULT_SPEC_KEY = "spec"
"""The data key the planner writes the spec to (``with: {spec_key: ...}`` changes it)."""


async def check_spec(ctx: ActionContext) -> ActionResult:
    """Submit the spec for review, or send an empty one back to the planner.

    A spec is a non-empty string or mapping under the node's spec key. The ``invalid``
    payload carries ``feedback`` so the planner knows why it plans again.
    """
    key = str(ctx.settings.get("spec_key", DEFAULT_SPEC_KEY))
    spec = ctx.data.get(key)
    if isinstance(spec, str | Mapping) and spec:
        return ActionResult(trigger="submit", output={"spec_key": key})
    return ActionResult(
        trigger="invalid",
        payload={"feedback": f"no spec was written to data key {key!r}; write one"},
    )
