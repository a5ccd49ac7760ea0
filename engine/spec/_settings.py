"""What a node's ``with:`` may hold: one registry of the keys each part of phasegraph reads.

A node's settings are free-form in the schema, so a misspelt key used to pass unseen: a
node given ``budgets: {retry: 3}`` for its machine's ``retries`` budget silently kept the
default limit. Every key phasegraph itself reads is declared here, by owner, and
:func:`settings_problems` checks a node's ``with:`` against them when a graph loads (so
``check`` and ``run`` refuse the same thing with the same message):

* ``with.budgets`` may name only budgets of the node's machine (or the machines nested
  in it), each an integer >= 0;
* a mapping the engine reads (``with.llm``, ``with.loop_detection``) may hold only the
  keys its owner reads;
* any other top-level key must be one an owner below reads or one the machine's
  ``setting:`` guards read, unless the node binds a ``python:`` action of its own,
  whose function may read keys no one can know before it runs. Even then a key named
  like a budget (it belongs under ``budgets:``) or a near-miss of a known key is refused.

Keep the registry in step with the code that reads settings: ``tests/spec/test_settings.py``
finds every ``settings.get("KEY")`` in the package and fails on a key missing here.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from phasegraph import model
from phasegraph.spec._suggest import did_you_mean

__all__ = ["NODE_SETTINGS", "OWN_PYTHON", "Setting", "settings_problems"]


Shape = Callable[[Any], bool]
"""Whether a setting's value has the shape its reader needs."""


@dataclass(frozen=True, slots=True)
class Setting:
    """A top-level ``with:`` key phasegraph reads.

    Attributes:
        owner: Who reads it, as messages name it.
        keys: The keys its mapping may hold; ``None`` when its value is not a mapping of
            fixed keys (checked by its owner, or free-form).
        shape: What its reader needs its value to be, checked at load; ``None``: any
            value (its reader takes it as text).
        needs: The shape in words, for messages (``a list of texts``).
    """

    owner: str
    keys: frozenset[str] | None = None
    shape: Shape | None = None
    needs: str = ""


def _owned(owner: str, *names: str) -> dict[str, Setting]:
    return {name: Setting(owner) for name in names}


def _whole(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _suggestions(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(listed, list) and all(isinstance(text, str) for text in listed)
        for listed in value.values()
    )


def _loop_detection(value: Any) -> bool:
    return isinstance(value, Mapping) and _whole(value.get("threshold", 2), 1)


def _mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


NODE_SETTINGS: Final[Mapping[str, Setting]] = MappingProxyType(
    {
        "budgets": Setting("the machine's budgets (limit overrides)"),
        "llm": Setting(
            "llm: actions (the endpoint)",
            frozenset({"base_url", "api_key_env", "script"}),
            _mapping,
            "a mapping, e.g. {base_url: http://127.0.0.1:8000/v1}",
        ),
        **_owned("tools: actions (tool rules)", "phases", "workspace"),
        "review_timeout": Setting("human: gates (the default review deadline)"),
        "loop_detection": Setting(
            "the loop_detection middleware",
            frozenset({"threshold"}),
            _loop_detection,
            "a mapping whose threshold is a whole number >= 1, e.g. {threshold: 3}",
        ),
        "suggestions": Setting(
            "phasegraph.concerns.fallback",
            None,
            _suggestions,
            "a mapping of error code to a list of suggestions, e.g. {timeout: [Try again later.]}",
        ),
        "error_key": Setting("phasegraph.concerns.fallback"),
        **_owned("phasegraph.concerns.spec", "spec_key"),
        **_owned(
            "phasegraph.concerns.team",
            "command",
            "validation_command",
            "rollback_command",
            "command_cwd",
        ),
        "command_timeout": Setting(
            "phasegraph.concerns.team", None, _number, "a number of seconds > 0"
        ),
        "auto_advance_after_steps": Setting(
            "phasegraph.concerns.solo", None, _whole, "a whole number >= 0"
        ),
        **_owned("phasegraph.concerns.plans", "plan_key", "conversation"),
    }
)
"""Every top-level ``with:`` key phasegraph reads, and who reads it."""

OWN_PYTHON: Final = ("phasegraph.concerns.",)
"""``python:`` targets whose settings are all in :data:`NODE_SETTINGS`."""

_NEAR: Final = 0.8  # how alike a key must be to a known one to be taken for a misspelling


def _suggest(word: str, choices: Collection[str], cutoff: float = 0.6) -> str | None:
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def _guard_reads(machines: Collection[model.MachineDef]) -> list[tuple[str, str]]:
    """(machine, dotted setting) for each ``setting:`` guard of the machines."""
    return [
        (machine.name, predicate.partition(":")[2])
        for machine in machines
        for transition in machine.transitions
        for predicate in (*transition.conditions, *transition.unless)
        if predicate.partition(":")[0] == "setting"
    ]


def _guarded(machines: Collection[model.MachineDef]) -> dict[str, str]:
    """Top-level settings the machines' ``setting:`` guards read -> the machine reading it."""
    read: dict[str, str] = {}
    for machine, dotted in _guard_reads(machines):
        read.setdefault(dotted.split(".")[0], machine)
    return read


def _blocks(machines: Collection[model.MachineDef]) -> dict[str, frozenset[str]]:
    """Top-level settings whose inner keys guards read (``recovery.enabled``) -> those keys."""
    inner: dict[str, set[str]] = {}
    for _, dotted in _guard_reads(machines):
        top, _, rest = dotted.partition(".")
        if rest:
            inner.setdefault(top, set()).add(rest.split(".")[0])
    return {top: frozenset(keys) for top, keys in inner.items()}


def _opens(bind: Mapping[str, model.ActionDef]) -> bool:
    """Whether a bound ``python:`` function of the user's own may read any setting."""
    return any(
        action.kind == "python" and not str(action.config.get("python", "")).startswith(OWN_PYTHON)
        for action in bind.values()
    )


@dataclass(frozen=True, slots=True)
class _Node:
    """A node's settings and what judges them."""

    label: str  # how messages name whose settings they are: "node 'x'"
    budgets: Mapping[str, str]  # budget -> the machine declaring it
    guarded: Mapping[str, str]  # setting read by a guard -> the machine reading it
    blocks: Mapping[str, frozenset[str]]  # a guarded block -> the inner keys guards read
    open: bool

    def known(self) -> set[str]:
        return {*NODE_SETTINGS, *self.guarded}


def settings_problems(
    node: model.NodeDef, machines: Collection[model.MachineDef], *, label: str | None = None
) -> list[tuple[tuple[str, ...], str]]:
    """Keys of ``node``'s ``with:`` that nothing reads, and budget overrides that are not limits.

    Args:
        node: The node, its settings as written.
        machines: Its machine and every machine nested in it.
        label: Whose settings they are, in messages; default ``node 'ID'`` (a machine's
            example gives its settings as a node would).

    Returns:
        (key path inside ``with``, message) for each problem.
    """
    judged = _Node(
        label=label or f"node {node.id!r}",
        budgets={b: m.name for m in machines for b in m.budgets},
        guarded=_guarded(machines),
        blocks=_blocks(machines),
        open=_opens(node.bind),
    )
    found: list[tuple[tuple[str, ...], str]] = []
    for key, value in node.settings.items():
        found += _key_problems(judged, str(key), value)
    return found


def _key_problems(node: _Node, key: str, value: Any) -> list[tuple[tuple[str, ...], str]]:
    where = f"{node.label}: with.{key}"
    if key == "budgets":
        return _budget_problems(node, value)
    setting = NODE_SETTINGS.get(key)
    if setting is not None and setting.shape is not None and not setting.shape(value):
        text = f"{where} must be {setting.needs} (read by {setting.owner}), not {value!r}"
        return [((key,), text)]
    if setting is not None and setting.keys is not None and isinstance(value, Mapping):
        reads = ", ".join(sorted(setting.keys))
        return [
            (
                (key, str(inner)),
                f"{where}: unknown key {inner!r}, which {setting.owner} does not read (it "
                f"reads: {reads}){did_you_mean(str(inner), setting.keys)}",
            )
            for inner in value
            if inner not in setting.keys
        ]
    if key in node.blocks:
        return _block_problems(node, key, value)
    if setting is not None or key in node.guarded:
        return []
    if key in node.budgets:
        text = (
            f"{where}: {key!r} is a budget of machine {node.budgets[key]!r}, and a budget's "
            f"limit is set under `budgets:`: write `with: {{budgets: {{{key}: ...}}}}`"
        )
        return [((key,), text)]
    near = _suggest(key, node.known(), _NEAR if node.open else 0.6)
    if node.open and near is None:
        return []  # the node's own python function may read it
    text = f"{where}: nothing reads this setting"
    if near is not None:
        reader = (
            NODE_SETTINGS[near].owner
            if near in NODE_SETTINGS
            else (f"the guards of machine {node.guarded[near]!r}")
        )
        text += f"; did you mean {near!r} (read by {reader})?"
    else:
        text += f" (known settings: {', '.join(sorted(node.known()))})"
    return [((key,), text)]


def _block_problems(node: _Node, key: str, value: Any) -> list[tuple[tuple[str, ...], str]]:
    """A block the guards read inside (``recovery: {enabled: true}``): only those keys count.

    A block that holds none of them reads as off, whatever else it holds.
    """
    where = f"{node.label}: with.{key}"
    read = node.blocks[key]
    listed = ", ".join(sorted(read))
    machine = node.guarded[key]
    example = f"{{{sorted(read)[0]}: true}}"
    if not isinstance(value, Mapping):
        text = (
            f"{where} must be a mapping, e.g. {example}: the guards of machine {machine!r} "
            f"read {key}.{listed}, so {value!r} reads as off"
        )
        return [((key,), text)]
    found: list[tuple[tuple[str, ...], str]] = []
    if not node.open:
        for inner in value:
            if inner not in read:
                text = (
                    f"{where}.{inner}: nothing reads this setting (the guards of machine "
                    f"{machine!r} read {key}.{listed})" + did_you_mean(str(inner), read)
                )
                found.append(((key, str(inner)), text))
    if value and not read & set(value):
        text = (
            f"{where} has no {listed}, so the guards of machine {machine!r} read it as off: "
            f"write {key}: {example} to switch it on, or {{{sorted(read)[0]}: false}}"
        )
        found.append(((key,), text))
    return found


def _budget_problems(node: _Node, value: Any) -> list[tuple[tuple[str, ...], str]]:
    where = f"{node.label}: with.budgets"
    if not isinstance(value, Mapping):
        return [(("budgets",), f"{where} must map budget names to limits, e.g. {{turns: 5}}")]
    found: list[tuple[tuple[str, ...], str]] = []
    listed = ", ".join(sorted(node.budgets)) or "none declared"
    for name, limit in value.items():
        if name not in node.budgets:
            text = (
                f"{where}: unknown budget {name!r} (budgets of its machines: {listed})"
                f"{did_you_mean(str(name), node.budgets)}"
            )
            found.append((("budgets", str(name)), text))
        elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            text = f"{where}.{name} must be a whole number >= 0, not {limit!r}"
            found.append((("budgets", str(name)), text))
    return found
