"""Pydantic models of the machine and graph YAML formats, and their JSON Schemas.

The only module that imports pydantic. It says what a well-formed machine or graph document
is and checks the rules that need only that document (declared states, budgets, node ids);
the loader adds the rules that span files. ``specs/*.schema.json`` are generated from these
models by :func:`write_specs`; ``tests/test_schema.py`` keeps them in step.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from types import NoneType
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args, get_origin

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag
from pydantic_core import ErrorDetails, PydanticCustomError

__all__ = [
    "ACTION_KINDS",
    "ID_PATTERN",
    "NAME_PATTERN",
    "PREDICATE_PATTERN",
    "ActionSpec",
    "BudgetSpec",
    "Checked",
    "GraphSpec",
    "HttpAction",
    "HttpRequest",
    "HumanAction",
    "Loc",
    "MachineSpec",
    "NodeSpec",
    "PythonAction",
    "ShellAction",
    "SpecIssue",
    "StateSpec",
    "TransitionSpec",
    "check_graph",
    "check_machine",
    "did_you_mean",
    "graph_json_schema",
    "machine_json_schema",
    "write_specs",
]

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
"""States, hooks, triggers and budgets: a letter, then letters, digits or ``_``."""
ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"
"""Node ids and machine, graph, middleware and interrupt names (``-`` allowed too)."""
PREDICATE_PATTERN = r"^(budget|payload|setting):[A-Za-z_][A-Za-z0-9_.]*$"
"""``budget:NAME``, ``payload:KEY`` or ``setting:DOTTED.KEY``."""
_SOURCE_PATTERN = r"^(\*|[A-Za-z][A-Za-z0-9_]*)$"
_TARGET_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"
_EXIT_PATTERN = r"^(default|-?[0-9]+)$"
_STATUS_PATTERN = r"^(default|[1-5][0-9][0-9])$"
ACTION_KINDS = ("python", "shell", "http", "human")
"""The action kinds, in the order messages list them."""

_PATTERN_HINTS: Mapping[str, str] = {
    NAME_PATTERN: "start with a letter and use only letters, digits and '_'",
    ID_PATTERN: "start with a letter and use only letters, digits, '_' and '-'",
    PREDICATE_PATTERN: "write budget:NAME, payload:KEY or setting:DOTTED.KEY",
    _TARGET_PATTERN: 'write "package.module:function"',
}

_Name = Annotated[str, Field(pattern=NAME_PATTERN)]
_Ident = Annotated[str, Field(pattern=ID_PATTERN)]
_Predicate = Annotated[str, Field(pattern=PREDICATE_PATTERN)]
_Outcome = Literal["success", "failed", "parked", "gave_up", "cancelled"]
_NonEmpty = Annotated[str, Field(min_length=1)]
Loc = tuple[str | int, ...]
"""A key path into a document: mapping keys and list indexes."""


def _shape(v: Any) -> str:
    return "<many>" if isinstance(v, list) else "<map>" if isinstance(v, Mapping) else "<one>"


def _action_kind(value: Any) -> str | None:
    if isinstance(value, _ActionBase):  # serializing a validated action
        return f"<{value.kind}>"
    if isinstance(value, Mapping):
        kinds = [kind for kind in ACTION_KINDS if kind in value]
        if len(kinds) == 1:
            return f"<{kinds[0]}>"
    return None


def _string_keys(value: object) -> object:
    # YAML reads `0:` as an int key; exit and status maps are keyed by strings.
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


_StringKeys = BeforeValidator(_string_keys)
_ExitMap = Annotated[dict[Annotated[str, Field(pattern=_EXIT_PATTERN)], _Name], _StringKeys]
_StatusMap = Annotated[dict[Annotated[str, Field(pattern=_STATUS_PATTERN)], _Name], _StringKeys]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BudgetSpec(_Spec):
    """A named counter with a limit; every entry into a `spend_on` state spends one unit."""

    limit: int = Field(ge=0, description="Units available (a node's with.budgets may override).")
    spend_on: list[_Name] = Field(min_length=1, description="States whose every entry spends one.")


_ROLES = {"final": "final", "hook": "hooked", "machine": "nesting a machine"}
_ONE_ROLE = {"not": {"anyOf": [{"required": list(pair)} for pair in combinations(_ROLES, 2)]}}


class StateSpec(_Spec):
    """A state: final, hooked (runs the action a graph binds), or nesting a machine."""

    model_config = ConfigDict(json_schema_extra=_ONE_ROLE)  # type: ignore[typeddict-item]

    final: _Outcome | None = Field(None, description="Node outcome when the machine ends here.")
    hook: _Name | None = Field(None, description="Slot a graph binds; default: the state name.")
    machine: _Ident | None = Field(None, description="Nested machine; its outcome is the trigger.")
    description: str = Field("", description="Free text for diagrams and docs.")

    @pydantic.model_validator(mode="after")
    def _one_role(self) -> StateSpec:
        roles = [word for role, word in _ROLES.items() if getattr(self, role) is not None]
        if len(roles) > 1:
            raise PydanticCustomError(
                "state_roles",
                "this state is both {roles}, but a state is final, hooked or nests a machine "
                "(a final state runs no action): keep only one of `final`, `hook`, `machine`",
                {"roles": " and ".join(roles)},
            )
        return self


_Source = Annotated[str, Field(pattern=_SOURCE_PATTERN)]
_Sources = Annotated[
    Annotated[_Source, Tag("<one>")] | Annotated[list[_Source], Field(min_length=1), Tag("<many>")],
    Discriminator(_shape),
]


class TransitionSpec(_Spec):
    """A transition; of those matching a trigger, the first whose predicates hold wins."""

    trigger: _Name = Field(description="The trigger (an action's result) that fires it.")
    source: _Sources = Field(description="State(s) it leaves from; '*' = every non-final state.")
    dest: _Name = Field(description="The state it enters.")
    conditions: list[_Predicate] = Field([], description="Predicates that must all hold.")
    unless: list[_Predicate] = Field([], description="Predicates that must all fail.")

    def sources(self) -> list[str]:
        """The source names as written (``*`` not expanded)."""
        return [self.source] if isinstance(self.source, str) else list(self.source)


class MachineSpec(_Spec):
    """A phasegraph machine file (states/NAME.yaml)."""

    model_config = ConfigDict(title="phasegraph machine")

    machine: _Ident | None = Field(None, description="Machine name; default: the file stem.")
    description: str = Field("", description="What the machine is for.")
    initial: _Name = Field(description="The state a node starts in.")
    budgets: dict[_Name, BudgetSpec] = Field({}, description="Budgets by name.")
    states: dict[_Name, StateSpec] = Field(min_length=1, description="States, in order.")
    transitions: list[TransitionSpec] = Field([], description="Transitions, in priority order.")


class _ActionBase(_Spec):
    timeout: float | None = Field(None, gt=0, description="Seconds before the action times out.")

    def trigger_sources(self) -> list[tuple[Loc, str]]:
        """Each trigger the action declares, with its key path inside the action."""
        listed: list[str] | None = getattr(self, "triggers", None)
        if listed is None:
            return self._implied()
        return [(("triggers", index), trigger) for index, trigger in enumerate(listed)]

    def declared_triggers(self) -> tuple[str, ...]:
        """The distinct triggers the action may return, in declaration order."""
        return tuple(dict.fromkeys(trigger for _, trigger in self.trigger_sources()))

    def _implied(self) -> list[tuple[Loc, str]]:
        return []

    @property
    def kind(self) -> str:
        """The action kind: python, shell, http or human."""
        return next(kind for kind in ACTION_KINDS if kind in type(self).model_fields)


class PythonAction(_ActionBase):
    """Call "module:function" (sync or async) with the action context."""

    python: str = Field(pattern=_TARGET_PATTERN, description='The callable, "module:function".')
    thread: bool = Field(True, description="Run a sync function in a worker thread.")
    triggers: list[_Name] | None = Field(None, description="Triggers the function may return.")


_Command = Annotated[
    Annotated[str, Field(min_length=1), Tag("<one>")]
    | Annotated[list[str], Field(min_length=1), Tag("<many>")],
    Discriminator(_shape),
]


class ShellAction(_ActionBase):
    """Run a command without a shell: an argv list, or one string split like a shell does."""

    shell: _Command = Field(description="argv list or command line; {name} templates.")
    cwd: str | None = Field(None, description="Working directory (a template).")
    env: dict[str, str] = Field({}, description="Extra environment variables (templates).")
    on_exit: _ExitMap = Field({"0": "ok", "default": "fail"}, description="Exit status -> trigger.")
    timeout_trigger: _Name | None = Field(
        None, description="Trigger on timeout (default: default)."
    )
    capture: _NonEmpty | None = Field(None, description="Data key that receives the stdout.")

    def _implied(self) -> list[tuple[Loc, str]]:
        found: list[tuple[Loc, str]] = [(("on_exit", k), v) for k, v in self.on_exit.items()]
        if self.timeout_trigger is not None:
            found.append((("timeout_trigger",), self.timeout_trigger))
        return found


class HttpRequest(_Spec):
    """The request an http action sends."""

    url: str = Field(min_length=1, description="URL (a template).")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field(
        "GET", description="Verb."
    )
    headers: dict[str, str] = Field({}, description="Request headers.")
    body: Any = Field(None, description="Request body: a string as is, anything else as JSON.")


class HttpAction(_ActionBase):
    """Send an HTTP request; the response status picks the trigger."""

    http: HttpRequest = Field(description="The request to send.")
    on_status: _StatusMap = Field(
        {"200": "ok", "default": "fail"}, description="Status -> trigger."
    )
    triggers: list[_Name] | None = Field(None, description="Triggers (default: on_status values).")

    def _implied(self) -> list[tuple[Loc, str]]:
        return [(("on_status", key), trigger) for key, trigger in self.on_status.items()]


class HumanAction(_ActionBase):
    """Pause the run on an interrupt until someone replies (or the timeout fires)."""

    human: _Ident = Field(description="The interrupt kind, e.g. review.")
    payload: dict[str, Any] = Field({}, description="What the answerer sees.")
    triggers: list[_Name] | None = Field(None, description="Replies accepted (and timeout).")


ActionSpec = Annotated[
    Annotated[PythonAction, Tag("<python>")]
    | Annotated[ShellAction, Tag("<shell>")]
    | Annotated[HttpAction, Tag("<http>")]
    | Annotated[HumanAction, Tag("<human>")],
    Discriminator(_action_kind, custom_error_type="action_kind", custom_error_message="kind"),
]
"""One action: exactly one of the kind keys python, shell, http, human."""

_Settings = Annotated[dict[_Ident, dict[str, Any]], Field(min_length=1, max_length=1)]
_Middleware = Annotated[
    Annotated[_Ident, Tag("<one>")] | Annotated[_Settings, Tag("<map>")],
    Discriminator(_shape),
]


class NodeSpec(_Spec):
    """One node of a graph: a machine, its prerequisites and its hook bindings."""

    id: _Ident = Field(description="Unique node id.")
    machine: _Ident = Field(description="Built-in machine name, or one from `machines:`.")
    needs: list[_Ident] = Field([], description="Ids of nodes that must succeed first.")
    writes: list[_NonEmpty] | None = Field(None, description="Top-level data keys it writes.")
    settings: dict[str, Any] = Field({}, alias="with", description="Free-form node settings.")
    bind: dict[_Name, ActionSpec] = Field({}, description="Hook -> action; bind every hook.")


class GraphSpec(_Spec):
    """A phasegraph workflow graph file (graphs/NAME.yaml)."""

    model_config = ConfigDict(title="phasegraph graph")

    graph: _Ident | None = Field(None, description="Graph name; default: the file stem.")
    description: str = Field("", description="What the workflow does.")
    concurrency: int = Field(3, ge=1, description="How many nodes may run at once.")
    input: dict[str, Any] | None = Field(None, description="JSON Schema of the run input.")
    reducers: dict[_NonEmpty, Literal["append", "merge"]] = Field(
        {}, description="Data key -> combiner."
    )
    middleware: list[_Middleware] = Field([], description="Name or {name: settings}; outer first.")
    machines: list[_NonEmpty] = Field([], description="Machine files, relative to this file.")
    nodes: list[NodeSpec] = Field(min_length=1, description="The nodes, in declaration order.")


_SpecT = TypeVar("_SpecT", MachineSpec, GraphSpec)


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem in a document, at a key path (mapping keys and list indexes)."""

    loc: Loc
    message: str


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


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Issues(list[SpecIssue]):
    def add(self, loc: Loc, text: str) -> None:
        self.append(SpecIssue(loc, text))

    def unknown(self, loc: Loc, text: str, name: str, known: Collection[str], what: str) -> None:
        listed = ", ".join(sorted(known)) or "none declared"
        self.add(loc, f"{text} {name!r} ({what}: {listed}){did_you_mean(name, known)}")


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


def _machine_issues(spec: MachineSpec, states: set[str]) -> _Issues:
    issues = _Issues()
    if spec.initial not in states:
        issues.unknown(("initial",), "initial names unknown state", spec.initial, states, "states")
    for name, budget in spec.budgets.items():
        for index, state in enumerate(budget.spend_on):
            if state not in states:
                text = f"budget {name!r} is spent on unknown state"
                issues.unknown(("budgets", name, "spend_on", index), text, state, states, "states")
    for index, transition in enumerate(spec.transitions):
        _transition_issues(issues, spec, states, ("transitions", index), transition)
    return issues


def _transition_issues(
    issues: _Issues, spec: MachineSpec, states: set[str], here: Loc, transition: TransitionSpec
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


def _graph_issues(spec: GraphSpec, ids: set[str]) -> _Issues:
    issues = _Issues()
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
    issues = tuple(_issue(model, error) for error in errors)
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


def _is_marker(part: str | int) -> bool:
    # Union tags ("<python>") and pydantic's "[key]" are not keys of the document.
    return isinstance(part, str) and (part == "[key]" or (part[:1], part[-1:]) == ("<", ">"))


def _dotted(loc: Loc) -> str:
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return text.removeprefix(".") or "top level"


def _issue(model: type[BaseModel], error: ErrorDetails) -> SpecIssue:
    loc = tuple(part for part in error["loc"] if not _is_marker(part))
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return SpecIssue(loc, f"{_dotted(loc[:-1])}: required key {loc[-1]!r} is missing")
    if kind == "extra_forbidden":
        key, allowed = str(loc[-1]), _allowed_keys(model, error["loc"][:-1])
        text = f"unknown key {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}"
    elif kind == "action_kind":
        text = _action_kind_message(value)
    elif kind == "string_pattern_mismatch":
        text = _pattern_message(str(value), str((error.get("ctx") or {}).get("pattern", "")))
    elif kind.startswith("state_") or isinstance(value, Mapping | list):
        text = error["msg"]
    else:
        text = f"{error['msg']} (got {value!r})"
        if isinstance(value, bool) and kind == "string_type":
            text += "; YAML reads yes/no/on/off/true/false as booleans: quote it"
    return SpecIssue(loc, f"{_dotted(loc)}: {text}")


def _pattern_message(value: str, pattern: str) -> str:
    text = f"{value!r} is not a valid name: {_PATTERN_HINTS.get(pattern, 'match ' + pattern)}"
    if pattern == NAME_PATTERN and ("/" in value or "." in value):
        text += " ('/' and '.' are reserved for nested state paths such as parent/child)"
    return text


def _action_kind_message(value: object) -> str:
    kinds = ", ".join(ACTION_KINDS)
    if not isinstance(value, Mapping):
        return f"an action is a mapping with exactly one kind key ({kinds}), got {value!r}"
    present = [kind for kind in ACTION_KINDS if kind in value]
    if present:
        return f"an action has exactly one kind, this one has {', '.join(present)}: keep one"
    models = (PythonAction, ShellAction, HttpAction, HumanAction)
    options = {name for model in models for name in model.model_fields}
    unknown = [str(key) for key in value if key not in options]
    if unknown:
        hint = did_you_mean(unknown[0], ACTION_KINDS)
        return f"unknown action kind {unknown[0]!r}: use one of {kinds}{hint}"
    return f"the action has no kind: add one of {kinds}"


def _allowed_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys the mapping at ``loc`` may have: walk the models' annotations along it."""
    hint: Any = model
    for part in (*loc, None):
        while get_origin(hint) is Annotated or NoneType in get_args(hint):  # X, X | None
            hint = next(arg for arg in get_args(hint) if arg is not NoneType)
        fields = getattr(hint, "model_fields", {})
        keys = {info.alias or name: info.annotation for name, info in fields.items()}
        if part is None:
            return list(keys)
        # A model field, a union member by tag, or the item type of a list or dict.
        tagged = [arg for arg in get_args(hint) if Tag(str(part)) in get_args(arg)[1:]]
        hint = keys.get(str(part)) if keys else (tagged or get_args(hint)[-1:] or [None])[0]
    return []


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
