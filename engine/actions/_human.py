"""``human:`` bindings: a gate where the run waits for a person's reply.

A human gate is not a callable: when a node enters a state bound to one, the interpreter
records a pending interrupt and the node waits. A reply (``phasegraph reply`` or
``Engine.reply``) fires the chosen trigger; a passed deadline fires ``timeout``.

A gate may name its ``reviewers``: principal names (``alice``, ``local:alice``) and
``group:NAME`` entries (every member of group ``NAME``). A reply that names its actor
is then refused unless the actor is one of them (:func:`admits`). A caller with the
store in hand is trusted: a program calling :meth:`~phasegraph.Engine.reply` without an
actor, and the command line, which records the local user (``local:USER``) but passes
``trusted=True``. A server names its caller and never trusts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phasegraph.actions._shell import render
from phasegraph.errors import ActionError, Problem, SpecError
from phasegraph.model import TEMPLATE_MAX_CHARS, ActionDef, Actor, BusyPolicy, empty_field

__all__ = [
    "DEFAULT_REVIEW_TIMEOUT",
    "GROUP_PREFIX",
    "REVIEW_KIND",
    "REVIEW_TIMEOUT_SETTING",
    "TIMEOUT_TRIGGER",
    "HumanGate",
    "admits",
    "build_gate",
    "render_payload",
]

TIMEOUT_TRIGGER = "timeout"
"""Fired on a waiting node when its interrupt's deadline has passed."""

REVIEW_KIND = "spec_review"
"""The interrupt kind of a spec review (DESIGN §4: it times out after 30 minutes)."""

DEFAULT_REVIEW_TIMEOUT = 1800.0
"""Seconds a ``spec_review`` gate whose state accepts ``timeout`` waits when its binding
names no ``timeout`` (the node setting :data:`REVIEW_TIMEOUT_SETTING` changes it)."""

REVIEW_TIMEOUT_SETTING = "review_timeout"
"""The node setting (``with: {review_timeout: SECONDS}``) that replaces the 30 minutes."""

GROUP_PREFIX = "group:"
"""A reviewer entry ``group:NAME`` admits every actor in group ``NAME``."""


def admits(reviewers: tuple[str, ...], actor: Actor | None) -> bool:
    """Whether ``actor`` may answer a gate that names ``reviewers``.

    A gate that names none admits anyone; a reply that names no actor comes from a
    trusted local caller and is admitted too. Otherwise the actor's name must be listed
    as a name, or one of its groups as ``group:NAME``. Names and groups are two
    namespaces: an actor *named* ``group:release`` is no member of ``release``, so a
    ``group:`` entry never matches a name.
    """
    if not reviewers or actor is None:
        return True
    for entry in reviewers:
        if entry.startswith(GROUP_PREFIX):
            if entry[len(GROUP_PREFIX) :] in actor.groups:
                return True
        elif entry == actor.name:
            return True
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanGate:
    """A declared human gate.

    Attributes:
        kind: The interrupt kind (``review``, ``spec_review``, ``approval``, ...).
        payload: What the answerer sees; strings are templates over input and data.
        timeout: Seconds until ``timeout`` fires, if ever.
        park: Whether the run counts as parked (not waiting) while the gate is open.
        triggers: The triggers a reply may fire (empty: any the state accepts).
        reviewers: Who may answer (see :func:`admits`; empty: anyone).
        busy: What a message for this gate does while its node is busy, in place of the
            graph's ``busy:`` policy (``None``: the graph's).
    """

    kind: str
    payload: Mapping[str, Any] = empty_field()
    timeout: float | None = None
    park: bool = False
    triggers: tuple[str, ...] = ()
    reviewers: tuple[str, ...] = ()
    busy: BusyPolicy | None = None


def build_gate(
    definition: ActionDef,
    *,
    settings: Mapping[str, Any] | None = None,
    accepts_timeout: bool = False,
) -> HumanGate:
    """The gate a ``human:`` binding declares.

    Args:
        definition: The binding.
        settings: The node's ``with`` block.
        accepts_timeout: Whether the gate's state has a ``timeout`` transition: a spec
            review there without a ``timeout`` of its own gets the default deadline.
    """
    config = definition.config
    timeout = config.get("timeout")
    if timeout is None and accepts_timeout and str(config["human"]) == REVIEW_KIND:
        timeout = (settings or {}).get(REVIEW_TIMEOUT_SETTING, DEFAULT_REVIEW_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise SpecError(
                [
                    Problem(
                        f"with.{REVIEW_TIMEOUT_SETTING}: expected a number of seconds >= 0, "
                        f"not {timeout!r}",
                        definition.location,
                    )
                ]
            )
    return HumanGate(
        kind=str(config["human"]),
        payload=dict(config.get("payload") or {}),
        timeout=float(timeout) if timeout is not None else None,
        park=bool(config.get("park", False)),
        triggers=definition.triggers,
        reviewers=tuple(config.get("reviewers") or ()),
        busy=None if config.get("busy") is None else BusyPolicy(config["busy"]),
    )


def render_payload(value: Any, values: Mapping[str, Any]) -> Any:
    """Fill ``{name}`` templates in every string of ``value`` (recursively).

    Raises:
        ActionError: A template cannot be filled, or all the strings filled come to more
            than :data:`~phasegraph.model.TEMPLATE_MAX_CHARS` characters.
    """
    budget = [TEMPLATE_MAX_CHARS]
    return _filled(value, values, budget)


def _filled(value: Any, values: Mapping[str, Any], budget: list[int]) -> Any:
    if isinstance(value, str):
        text = render(value, values)
        budget[0] -= len(text)
        if budget[0] < 0:  # each string fits, but together they would make a huge payload
            raise ActionError(
                f"the rendered payload is longer than {TEMPLATE_MAX_CHARS} characters: "
                "pass smaller values"
            )
        return text
    if isinstance(value, Mapping):
        return {str(k): _filled(v, values, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_filled(v, values, budget) for v in value]
    return value
