"""The machine and graph YAML formats: checking documents, and their JSON Schemas.

The models live in :mod:`phasegraph.spec._models` and the wording of problems in
:mod:`phasegraph.spec._messages`; this module checks a parsed document against a model
plus the rules that need only that document (declared states, budgets, node ids), keeps
checking past bad entries (salvaging) so every problem is reported at once, and
re-exports the public names of both. The loader adds the rules that span files.
``specs/*.schema.json`` are generated from the models by :func:`write_specs`;
``tests/test_schema.py`` keeps them in step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import pydantic
from pydantic_core import ErrorDetails

from phasegraph.spec._messages import Issues, SpecIssue, did_you_mean, issue_of
from phasegraph.spec._models import (
    ACTION_KINDS,
    FALLBACK,
    ID_PATTERN,
    NAME_PATTERN,
    PREDICATE_PATTERN,
    ActionSpec,
    BudgetSpec,
    BusySpec,
    ExampleSpec,
    ExampleStepSpec,
    GraphAction,
    GraphSpec,
    HttpAction,
    HttpRequest,
    HumanAction,
    Loc,
    MachineSpec,
    NodeSpec,
    PlanAction,
    PlanSpec,
    PythonAction,
    ShellAction,
    SpendSpec,
    StateSpec,
    TemplateSpec,
    TransitionSpec,
    step_parts,
)

__all__ = [
    "ACTION_KINDS",
    "FALLBACK",
    "ID_PATTERN",
    "NAME_PATTERN",
    "PREDICATE_PATTERN",
    "ActionSpec",
    "BudgetSpec",
    "BusySpec",
    "Checked",
    "ExampleSpec",
    "GraphAction",
    "GraphSpec",
    "HttpAction",
    "HttpRequest",
    "HumanAction",
    "Loc",
    "MachineSpec",
    "NodeSpec",
    "PlanAction",
    "PlanSpec",
    "PythonAction",
    "ShellAction",
    "SpecIssue",
    "SpendSpec",
    "StateSpec",
    "TemplateSpec",
    "TransitionSpec",
    "check_graph",
    "check_machine",
    "did_you_mean",
    "graph_json_schema",
    "machine_json_schema",
    "write_specs",
]

_SpecT = TypeVar("_SpecT", MachineSpec, GraphSpec)


@dataclass(frozen=True, slots=True)
class Checked(Generic[_SpecT]):
    """The outcome of checking one document.

    Attributes:
        spec: The valid document; with issues, what could be salvaged (bad entries dropped
            so that later rules still get checked), or None.
        issues: Every problem found, with key paths into the document.
        kept: Document indexes of the items left in each list shortened by salvaging.
    """

    spec: _SpecT | None
    issues: tuple[SpecIssue, ...]
    kept: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def locate(self, loc: Loc) -> Loc:
        """Map a key path into ``spec`` to the same place in the document."""
        if len(loc) > 1 and isinstance(loc[0], str) and isinstance(loc[1], int):
            kept = self.kept.get(loc[0])
            if kept is not None and loc[1] < len(kept):
                return (loc[0], kept[loc[1]], *loc[2:])
        return loc


def _declared(data: object, field: str, key: str | None = None) -> set[str]:
    """Names declared in the raw document, including entries that failed validation."""
    raw = data.get(field) if isinstance(data, Mapping) else None
    if key is not None and isinstance(raw, list):
        raw = [item.get(key) for item in raw if isinstance(item, Mapping)]
    return {n for n in raw if isinstance(n, str)} if isinstance(raw, list | dict) else set()


def check_machine(data: object) -> Checked[MachineSpec]:
    """Validate a machine document and the rules that need only this document.

    Args:
        data: The parsed YAML document; see :class:`Checked` for what comes back.
    """
    checked = _validate(MachineSpec, data)
    if checked.spec is None:
        return checked
    states = _declared(data, "states") | set(checked.spec.states)
    return _with(checked, _machine_issues(checked.spec, states))


def check_graph(data: object) -> Checked[GraphSpec]:
    """Validate a graph document and the rules that need only this document.

    Args:
        data: The parsed YAML document; see :class:`Checked` for what comes back.
    """
    checked = _validate(GraphSpec, data)
    if checked.spec is None:
        return checked
    return _with(checked, _graph_issues(checked.spec, _declared(data, "nodes", "id")))


def _with(checked: Checked[_SpecT], issues: list[SpecIssue]) -> Checked[_SpecT]:
    moved = tuple(SpecIssue(checked.locate(issue.loc), issue.message) for issue in issues)
    return Checked(checked.spec, checked.issues + moved, checked.kept)


def _machine_issues(spec: MachineSpec, states: set[str]) -> Issues:
    issues = Issues()
    if spec.initial not in states:
        issues.unknown(("initial",), "initial names unknown state", spec.initial, states, "states")
    for name, budget in spec.budgets.items():
        for index, state in enumerate(budget.spend_on):
            if state not in states:
                text = f"budget {name!r} is spent on unknown state"
                issues.unknown(("budgets", name, "spend_on", index), text, state, states, "states")
    for declared in spec.states:
        _retries_issues(issues, spec, states, declared)
    for index, transition in enumerate(spec.transitions):
        _transition_issues(issues, spec, states, ("transitions", index), transition)
    named: dict[str, int] = {}
    for index, example in enumerate(spec.examples):
        here = ("examples", index)
        if example.name in named:
            text = f"example #{named[example.name] + 1} is named {example.name!r} too: rename one"
            issues.add((*here, "name"), text)
        named.setdefault(example.name, index)
        _example_issues(issues, spec, states, here, example)
    return issues


def _hook_of(spec: MachineSpec, name: str) -> str | None:
    state = spec.states[name]  # a state that is neither final nor nesting is its own hook
    return state.hook or (None if state.final or state.machine else name)


def _retries_issues(issues: Issues, spec: MachineSpec, states: set[str], name: str) -> None:
    """A ``retries:`` state makes the call of another hooked state of its hook again."""
    target = spec.states[name].retries
    if target is None:
        return
    here = ("states", name, "retries")
    if target not in states:
        issues.unknown(here, "retries names unknown state", target, states, "states")
        return
    hooks = (_hook_of(spec, name), _hook_of(spec, target))
    if target == name or spec.states[target].retries or hooks[0] is None or hooks[0] != hooks[1]:
        issues.add(
            here,
            f"state {name!r} retries {target!r}, but a retry makes the call of another state "
            f"again: both need the same hook (here {hooks[0]!r} and {hooks[1]!r}), and the "
            "retried state retries nothing itself",
        )


def _example_issues(
    issues: Issues, spec: MachineSpec, states: set[str], here: Loc, example: ExampleSpec
) -> None:
    """Names an example uses that this machine does not declare.

    A machine that nests others also fires their triggers and enters their states, so
    only the outermost state of a path is checked there; the rest is known when the
    example runs. Its ``with:`` is judged with the machines it nests, as a node's is
    (:meth:`phasegraph.spec._machines.Resolver.walk`).
    """
    flat = not any(state.machine for state in spec.states.values())
    what = f"example {example.name!r}"
    for index, step in enumerate(example.steps):
        _step_issues(issues, spec, states, (*here, "steps", index), what, step, flat=flat)
    for name in example.spent or {}:
        if "/" not in name and name not in spec.budgets:
            text = f"{what} counts unknown budget"
            issues.unknown((*here, "spent", name), text, name, spec.budgets, "budgets")


def _step_issues(
    issues: Issues,
    spec: MachineSpec,
    states: set[str],
    loc: Loc,
    what: str,
    step: str | ExampleStepSpec,
    *,
    flat: bool,
) -> None:
    trigger, keys, to = step_parts(step)
    triggers = {t.trigger for t in spec.transitions}
    if flat and trigger not in triggers:
        issues.unknown(loc, f"{what} fires unknown trigger", trigger, triggers, "triggers")
    outer = to.split("/")[0]
    if outer not in states:
        issues.unknown(loc, f"{what} enters unknown state", outer, states, "states")
    elif flat and "/" in to:
        issues.add(loc, f"{what} enters {to!r}, but {outer!r} nests no machine")
    read = {
        p.partition(":")[2]
        for t in spec.transitions
        for p in (*t.conditions, *t.unless)
        if p.startswith("payload:")
    }
    for key in keys if flat else ():
        if key not in read:
            text = f"{what} sets payload key"
            issues.unknown((*loc, "payload", key), text, key, read, "guards read")


def _transition_issues(
    issues: Issues, spec: MachineSpec, states: set[str], here: Loc, transition: TransitionSpec
) -> None:
    what = f"transition {transition.trigger!r}"
    single = isinstance(transition.source, str)
    for position, source in enumerate(transition.sources()):
        loc = (*here, "source") if single else (*here, "source", position)
        if source != "*" and source not in states:
            issues.unknown(loc, f"{what} leaves from unknown state", source, states, "states")
        elif source in spec.states and spec.states[source].final is not None:
            fix = f"remove the transition or make {source!r} non-final"
            issues.add(loc, f"{what} leaves final state {source!r}: final states end, so {fix}")
    if transition.dest not in states:
        text = f"{what} enters unknown state"
        issues.unknown((*here, "dest"), text, transition.dest, states, "states")
    for key in ("conditions", "unless"):
        for position, predicate in enumerate(getattr(transition, key)):
            kind, _, name = predicate.partition(":")
            if kind == "budget" and name not in spec.budgets:
                text = f"predicate {predicate!r} names unknown budget"
                issues.unknown((*here, key, position), text, name, spec.budgets, "budgets")


def _graph_issues(spec: GraphSpec, ids: set[str]) -> Issues:
    issues = Issues()
    offered: dict[str, str] = {}
    for server, settings in spec.mcp.items():
        for index, tool in enumerate(settings.tools):
            other = offered.setdefault(tool, server)
            if other != server:
                text = (
                    f"MCP servers {other!r} and {server!r} both offer tool {tool!r}: "
                    "take it from one of them"
                )
                issues.add(("mcp", server, "tools", index), text)
    first: dict[str, int] = {}
    for index, node in enumerate(spec.nodes):
        if node.id in first:
            text = (
                f"duplicate node id {node.id!r} (node #{first[node.id] + 1} has it too): rename one"
            )
            issues.add(("nodes", index, "id"), text)
        first.setdefault(node.id, index)
        for position, need in enumerate(node.needs):
            if need not in ids:
                text = f"node {node.id!r} needs unknown node"
                issues.unknown(("nodes", index, "needs", position), text, need, ids, "nodes")
    return issues


def _validate(model: type[_SpecT], data: object) -> Checked[_SpecT]:
    try:
        return Checked(model.model_validate(data), ())
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
    issues = tuple(issue_of(model, error) for error in errors)
    kept, positions = _salvage(data, errors) if isinstance(data, Mapping) else (None, {})
    try:
        return Checked(model.model_validate(kept), issues, positions)
    except pydantic.ValidationError:  # not salvageable: report what is wrong, check no further
        return Checked(None, issues)


def _salvage(
    data: Mapping[Any, Any], errors: list[ErrorDetails]
) -> tuple[dict[Any, Any], dict[str, tuple[int, ...]]]:
    """Drop the list items, entries and fields that failed, remembering list positions."""
    kept = dict(data)
    bad: dict[Any, set[Any]] = {}
    for error in errors:
        head, *rest = error["loc"] or ("",)
        if rest and isinstance(kept.get(head), list | dict):
            bad.setdefault(head, set()).add(rest[0])
        else:
            kept.pop(head, None)
    positions: dict[str, tuple[int, ...]] = {}
    for head, entries in bad.items():
        value = kept.get(head)
        if isinstance(value, list):
            positions[head] = tuple(i for i in range(len(value)) if i not in entries)
            kept[head] = [value[i] for i in positions[head]]
        elif isinstance(value, dict):
            kept[head] = {key: item for key, item in value.items() if key not in entries}
    return kept, positions


_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _closed(node: Any) -> Any:
    # Pydantic leaves pattern-keyed objects open to other keys; the models reject them.
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if isinstance(node, dict):
        node = {key: _closed(value) for key, value in node.items()}
        if "patternProperties" in node:
            node.setdefault("additionalProperties", False)
    return node


def machine_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of machine files (as written to specs/machine.schema.json)."""
    return {"$schema": _DIALECT, **_closed(MachineSpec.model_json_schema(by_alias=True))}


def graph_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of graph files (as written to specs/graph.schema.json)."""
    return {"$schema": _DIALECT, **_closed(GraphSpec.model_json_schema(by_alias=True))}


def write_specs(directory: Path) -> list[Path]:
    """Write ``machine.schema.json`` and ``graph.schema.json`` deterministically.

    Keys are sorted, indented by two, with a trailing newline: fresh output can be compared
    byte for byte with the checked-in files.

    Args:
        directory: Where to write (the repository's ``specs/``); created if missing.

    Returns:
        The written paths, machine schema first.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in (("machine", machine_json_schema()), ("graph", graph_json_schema())):
        path = directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written
