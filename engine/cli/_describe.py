"""What a built-in machine or tool is, read from its definition, for people to read.

:func:`describe_machine` and :func:`describe_tool` gather the facts (states, triggers,
outcomes, budgets, the ``with:`` settings read, what is written; a tool's arguments,
effect kind, results and rules) from the machine's YAML and the tool's code, so the
description cannot drift from what runs. :func:`~phasegraph.cli._layout.render_text`
wraps one for a terminal (``phasegraph machines NAME``, ``phasegraph tools``); the docs
site renders the same :class:`~phasegraph.cli._layout.Description` as Markdown
(``docs/hooks/refpages``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from phasegraph.actions import effect_of
from phasegraph.actions._base import declared_writes
from phasegraph.cli._layout import Description, Entry, Section
from phasegraph.model import Effect, MachineDef, TransitionDef
from phasegraph.spec._concerns import CONCERN_TRIGGERS
from phasegraph.spec._settings import NODE_SETTINGS
from phasegraph.tools._registry import ADVANCE_TOOL, BUILTIN_TOOLS, advance, scope_of_call
from phasegraph.tools._schemas import describe_tool as tool_schema

__all__ = ["builtin_tools", "describe_concern", "describe_machine", "describe_tool"]


# --------------------------------------------------------------------------- machines


def _condition(transition: TransitionDef) -> str:
    parts = []
    if transition.conditions:
        parts.append(" if " + " and ".join(transition.conditions))
    if transition.unless:
        parts.append(" unless " + " or ".join(transition.unless))
    return "".join(parts)


def _state_text(machine: MachineDef, name: str) -> str:
    state = machine.states[name]
    if state.final is not None:
        kind = f"final, outcome {state.final.value}"
    elif state.machine is not None:
        kind = f"nests machine {state.machine}"
    else:
        kind = f"runs hook {state.hook or name}"
    return f"{kind}: {state.description}" if state.description else kind


def _triggers(machine: MachineDef) -> tuple[Entry, ...]:
    """One entry per transition, grouped by trigger in the order triggers first appear."""
    order = list(dict.fromkeys(t.trigger for t in machine.transitions))
    return tuple(
        Entry(t.trigger, f"{', '.join(t.source)} -> {t.dest}{_condition(t)}")
        for trigger in order
        for t in machine.transitions
        if t.trigger == trigger
    )


def _outcomes(machine: MachineDef) -> tuple[Entry, ...]:
    by_outcome: dict[str, list[str]] = {}
    for name, state in machine.states.items():
        if state.final is not None:
            by_outcome.setdefault(state.final.value, []).append(name)
    return tuple(
        Entry(outcome, f"ends in {', '.join(states)}") for outcome, states in by_outcome.items()
    )


def _budgets(machine: MachineDef) -> tuple[Entry, ...]:
    entries = []
    for name, budget in machine.budgets.items():
        spent = (
            f"every entry into {', '.join(budget.spend_on)} spends one"
            if budget.spend_on
            else "spent by actions only"
        )
        entries.append(Entry(name, f"limit {budget.limit}; {spent}"))
    return tuple(entries)


def _hooks(machine: MachineDef) -> dict[str, list[str]]:
    """Hook -> the states that run it, in declaration order."""
    hooks: dict[str, list[str]] = {}
    for name, state in machine.states.items():
        if state.final is None and state.machine is None:
            hooks.setdefault(state.hook or name, []).append(name)
    return hooks


def _concern(hook: str) -> str | None:
    """The ``python:`` target of the concern action named like ``hook``, if there is one."""
    return next((t for t in CONCERN_TRIGGERS if t.rsplit(":", 1)[1] == hook), None)


def _fires(machine: MachineDef, states: list[str]) -> list[str]:
    return sorted({t.trigger for t in machine.transitions if set(t.source) & set(states)})


def _hook_entries(machine: MachineDef) -> tuple[Entry, ...]:
    entries = []
    for hook, states in _hooks(machine).items():
        text = f"runs in {', '.join(states)}; may fire {', '.join(_fires(machine, states))}"
        target = _concern(hook)
        if target is not None:
            text += f"; bind {target} (fires {', '.join(CONCERN_TRIGGERS[target])})"
        entries.append(Entry(hook, text))
    return tuple(entries)


def _guards(machine: MachineDef) -> dict[str, list[str]]:
    """``setting:`` key -> the triggers whose transitions it guards."""
    guards: dict[str, list[str]] = {}
    for t in machine.transitions:
        for predicate in (*t.conditions, *t.unless):
            kind, _, key = predicate.partition(":")
            if kind == "setting" and t.trigger not in guards.setdefault(key, []):
                guards[key].append(t.trigger)
    return guards


def _concern_owners(machine: MachineDef) -> dict[str, list[str]]:
    """Concern module -> its actions named like one of the machine's hooks."""
    owners: dict[str, list[str]] = {}
    for hook in _hooks(machine):
        target = _concern(hook)
        if target is not None:
            owners.setdefault(target.split(":", 1)[0], []).append(target)
    return owners


def _settings(machine: MachineDef) -> tuple[Entry, ...]:
    readers: dict[str, list[str]] = {
        f"budgets.{name}": [f"the {name} budget's limit (default {budget.limit})"]
        for name, budget in machine.budgets.items()
    }
    for key, triggers in _guards(machine).items():
        readers.setdefault(key, []).append(f"tested by guards of {', '.join(triggers)}")
    owners = _concern_owners(machine)
    for key, setting in NODE_SETTINGS.items():
        if setting.owner in owners:
            shape = f" as {setting.needs}" if setting.needs else ""
            readers.setdefault(key, []).append(f"read by {setting.owner}{shape}")
    return tuple(Entry(key, "; ".join(texts)) for key, texts in readers.items())


def _writes(machine: MachineDef) -> Section:
    entries = []
    for target in (t for targets in _concern_owners(machine).values() for t in targets):
        module, _, function = target.partition(":")
        action = getattr(importlib.import_module(module), function)
        keys = declared_writes(action, {})
        if keys:
            entries.append(Entry(target, f"writes data key {', '.join(keys)} (by default)"))
    note = (
        "The machine itself writes no data: the actions bound to its hooks do (declare "
        "the keys in the node's writes:). Every step is committed with its trigger, "
        "payload and budget spending."
    )
    return Section("Writes", tuple(entries), note)


def describe_machine(machine: MachineDef) -> Description:
    """The facts of ``machine``, read from its definition."""
    states = tuple(Entry(name, _state_text(machine, name)) for name in machine.states)
    nested = sorted({s.machine for s in machine.states.values() if s.machine})
    sections = [
        Section("States", states, f"Starts in {machine.initial}."),
        Section("Hooks", _hook_entries(machine), "What a graph binds (bind: HOOK: ACTION)."),
        Section("Triggers", _triggers(machine), "The first transition whose guards hold wins."),
        Section("Outcomes", _outcomes(machine)),
        Section(
            "Budgets",
            _budgets(machine),
            "" if machine.budgets else "None: nothing bounds a loop but the bound actions.",
        ),
        Section(
            "Settings",
            _settings(machine),
            "Keys of the node's with: block this machine reads."
            + (f" Nested machines read their own: {', '.join(nested)}." if nested else ""),
        ),
        _writes(machine),
    ]
    return Description("machine", machine.name, machine.description, tuple(sections))


def describe_concern(target: str, machines: Mapping[str, MachineDef]) -> Description:
    """The facts of concern action ``target`` (``module:function``).

    The hooks of ``machines`` it serves are those named like its function.
    """
    module, _, function = target.partition(":")
    action = getattr(importlib.import_module(module), function)
    serves = [
        Entry(name, f"hook {function} (states {', '.join(states)})")
        for name, machine in machines.items()
        for hook, states in _hooks(machine).items()
        if hook == function
    ]
    settings = tuple(
        Entry(key, f"{setting.owner}, as {setting.needs}" if setting.needs else setting.owner)
        for key, setting in NODE_SETTINGS.items()
        if setting.owner == module
    )
    writes = declared_writes(action, {})
    sections = (
        Section(
            "Fires",
            tuple(Entry(t, "") for t in CONCERN_TRIGGERS[target]),
            "A raised error fires error.",
        ),
        Section(
            "Serves", tuple(serves), "" if serves else "No built-in machine has a hook of its name."
        ),
        Section("Settings", settings, "Keys of the node's with: block its module reads."),
        Section(
            "Writes",
            (),
            f"Data key {', '.join(writes)} (by default)." if writes else "No data key it declares.",
        ),
    )
    return Description("concern action", target, inspect.getdoc(action) or target, sections)


# --------------------------------------------------------------------------- tools

_EFFECTS: Final[Mapping[Effect, str]] = {
    Effect.NONE: "it only reads, so a resume may run it again freely",
    Effect.IDEMPOTENT: "running it again with the same effect id gives the same outcome",
    Effect.ONCE: "it must not happen twice: its intent is committed first, and an "
    "outcome a crash left unknown is settled by the binding's on_unknown policy",
}

_REFUSALS: Final = ("ToolRefused", "error_result")


def builtin_tools() -> dict[str, Callable[..., Any]]:
    """Every tool a graph has without declaring any, by name (``advance`` included)."""
    return {**BUILTIN_TOOLS, ADVANCE_TOOL: advance}


def _functions(module: Any) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions of ``module`` and its classes' methods, by name."""
    tree = ast.parse(inspect.getsource(module))
    return {
        node.name: node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _closure(*functions: Callable[..., Any]) -> Iterator[ast.AST]:
    """The AST of each function and of what it names in its module, transitively.

    What is named: a function or method of the module (how its results and refusals
    are found).
    """
    for function in functions:
        defined = _functions(inspect.getmodule(function))
        todo, seen = [function.__name__], set()
        while todo:
            name = todo.pop()
            if name in seen or name not in defined:
                continue
            seen.add(name)
            for node in ast.walk(defined[name]):
                yield node
                if isinstance(node, ast.Name) and node.id not in _REFUSALS:
                    todo.append(node.id)
                elif isinstance(node, ast.Attribute):
                    todo.append(node.attr)


def _keys(returned: ast.Dict, assigned: Mapping[str, ast.Dict]) -> list[str]:
    keys = []
    for key, value in zip(returned.keys, returned.values, strict=True):
        if isinstance(key, ast.Constant):
            keys.append(str(key.value))
        elif key is None and isinstance(value, ast.Name) and value.id in assigned:
            keys += _keys(assigned[value.id], assigned)  # {**result, ...}
    return keys


def _results(function: Callable[..., Any]) -> tuple[list[str], list[str]]:
    """The keys of the mappings ``function`` returns, and the error codes it may give.

    The codes include those of the ``cwd`` every call takes.
    """
    keys: list[str] = []
    codes: list[str] = []
    nodes = list(_closure(function, scope_of_call))
    assigned = {
        node.targets[0].id: node.value
        for node in nodes
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Dict)
    }
    for node in nodes:
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            keys += _keys(node.value, assigned)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _REFUSALS
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            codes.append(str(node.args[0].value))
    return list(dict.fromkeys(keys)), sorted(set(codes))


def _arguments(name: str, tool: Callable[..., Any]) -> tuple[Entry, ...]:
    schema = tool_schema(name, tool)["function"]["parameters"]
    parameters = inspect.signature(tool).parameters
    entries = []
    for argument, shape in schema["properties"].items():
        kind = shape.get("type", "any")
        if kind == "array":
            kind = f"array of {shape['items'].get('type', 'any')}"
        default = parameters[argument].default
        given = "required" if argument in schema["required"] else f"default {default!r}"
        entries.append(Entry(argument, f"{kind}, {given}"))
    entries.append(
        Entry(
            "cwd",
            "string, optional: the folder relative paths resolve against and the call "
            "may not leave (inside with.workspace)",
        )
    )
    return tuple(entries)


def _tool_settings(name: str) -> tuple[Entry, ...]:
    allowed = (
        'allowed only in a phase that lists it by name (tools: "*" leaves it out)'
        if name == ADVANCE_TOOL
        else 'allowed in a phase whose tools list names it, or is "*"'
    )
    entries = [
        Entry("with.workspace", "the folder no call may leave (default: the current one)"),
        Entry("with.phases.PHASE.tools", allowed),
    ]
    if name == "run_command":
        entries += [
            Entry("with.phases.PHASE.deny_commands", "words no command of the phase may contain"),
            Entry("with.phases.PHASE.allow_commands", "the only programs the phase may start"),
        ]
    return tuple(entries)


def describe_tool(name: str, tool: Callable[..., Any]) -> Description:
    """The facts of tool ``name``, read from its code and its docstring."""
    keys, codes = _results(tool)
    effect = effect_of(tool)
    outcomes = [Entry("result", ", ".join(keys) or "(a mapping)")]
    if codes:
        outcomes.append(Entry("error", f"{', '.join(codes)}, phase_violation; with a message"))
    writes = (
        "Nothing: it only reads."
        if effect is Effect.NONE
        else "Outside the run only (files, processes), never the run's data."
    )
    sections = (
        Section("Arguments", _arguments(name, tool)),
        Section("Effect", (Entry(effect.value, _EFFECTS[effect]),)),
        Section(
            "Outcomes",
            tuple(outcomes),
            "The calling action gets a mapping back; an expected failure is data, not an "
            "exception.",
        ),
        Section("Settings", _tool_settings(name), "Keys of the node's with: block."),
        Section("Writes", (), f"{writes} Its result goes back to the calling action."),
    )
    return Description("tool", name, inspect.getdoc(tool) or name, sections)
