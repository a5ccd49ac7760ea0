"""Pydantic models of the machine and graph YAML formats: what a well-formed document is.

The rules here need nothing but the document's own shape (key names, types, patterns,
one kind per action, one role per state). :mod:`phasegraph.spec._schema` adds the rules that
need the whole document, turns validation errors into messages and generates
``specs/*.schema.json`` from these models.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import Annotated, Any, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
)
from pydantic_core import PydanticCustomError

from phasegraph.model import template_parts
from phasegraph.spec._concerns import CONCERN_TRIGGERS
from phasegraph.spec._input import json_schema_error

__all__ = [
    "ACTION_KINDS",
    "FALLBACK",
    "HEADER_PATTERN",
    "ID_PATTERN",
    "NAME_PATTERN",
    "PREDICATE_PATTERN",
    "REVIEWER_PATTERN",
    "SHELL_FALLBACK_TRIGGER",
    "STATE_PATH_PATTERN",
    "STATUS_PATTERN",
    "STEP_PATTERN",
    "TARGET_PATTERN",
    "URL_PATTERN",
    "ActionSpec",
    "BudgetSpec",
    "ChildGraphSpec",
    "ExampleSpec",
    "ExampleStepSpec",
    "GraphAction",
    "GraphSpec",
    "HttpAction",
    "HttpRequest",
    "HumanAction",
    "LlmAction",
    "LlmRequest",
    "Loc",
    "MachineSpec",
    "McpServerSpec",
    "NodeSpec",
    "PlanAction",
    "PlanConcurrency",
    "PlanSpec",
    "PythonAction",
    "ShellAction",
    "StateSpec",
    "TemplateSpec",
    "ToolsAction",
    "TransitionSpec",
    "step_parts",
    "step_times",
]

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
"""States, hooks, triggers and budgets: a letter, then letters, digits or ``_``."""
ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"
"""Node ids and machine, graph, middleware and interrupt names (``-`` allowed too)."""
ITEM_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
"""A plan item's id: the child node is ``PARENT.ID`` (a map numbers its items)."""
PLAN_TRIGGERS = ("done", "failed", "refused")
"""What a ``plan:`` binding fires: its children all succeeded, some did not, or the plan
was refused (the refusal is the payload's ``feedback``)."""
CHILD_TRIGGERS = ("completed", "failed")
"""What a ``graph:`` binding fires: its child run completed, or it ended otherwise (failed,
cancelled, or it could not start)."""
PREDICATE_PATTERN = r"^(budget|payload|setting):[A-Za-z_][A-Za-z0-9_.]*$"
"""``budget:NAME``, ``payload:KEY`` or ``setting:DOTTED.KEY``."""
STATE_PATH_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$"
"""A state, or a nested state as ``parent/child``."""
STEP_PATTERN = r"^[A-Za-z][A-Za-z0-9_]* *-> *[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$"
"""An example's step written as ``TRIGGER -> STATE``."""
_SOURCE_PATTERN = r"^(\*|[A-Za-z][A-Za-z0-9_]*)$"
TARGET_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"
"""A ``python:`` target: ``package.module:function``."""
_EXIT_PATTERN = r"^(default|-?[0-9]+)$"
SHELL_FALLBACK_TRIGGER = "fail"  # the shell action's own fallback (phasegraph.actions._shell)
"""What a ``shell:`` action fires for an exit status its ``on_exit`` neither lists nor
covers with ``default`` (and on a timeout without ``timeout_trigger``)."""
STATUS_PATTERN = r"^(default|[1-5][0-9][0-9]|[1-5]xx)$"
"""An ``on_status`` key: a status code (``404``), a class (``4xx``) or ``default``."""
URL_PATTERN = r"^https?://[^/?#]"
"""An ``http:`` URL: absolute, ``http`` or ``https``, the host written out."""
HEADER_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
"""An HTTP header name (an RFC 9110 token)."""
ACTION_KINDS = ("python", "shell", "http", "human", "llm", "tools", "plan", "graph")
"""The action kinds, in the order messages list them."""

_Name = Annotated[str, Field(pattern=NAME_PATTERN)]
_Ident = Annotated[str, Field(pattern=ID_PATTERN)]
_Predicate = Annotated[str, Field(pattern=PREDICATE_PATTERN)]
_Outcome = Literal["success", "failed", "parked", "gave_up", "cancelled"]
_NonEmpty = Annotated[str, Field(min_length=1)]
REVIEWER_PATTERN = r"^(group:)?[^\s:][^\s]*$"
"""A gate's reviewer: a principal name, or ``group:NAME``; no spaces, not empty."""
_Reviewer = Annotated[str, Field(pattern=REVIEWER_PATTERN)]
Loc = tuple[str | int, ...]
"""A key path into a document: mapping keys and list indexes."""
FALLBACK = ("<fallback>",)
"""Leads the key path of a trigger an action fires without listing it (see
:meth:`ShellAction._implied`); the rest of the path is where the map is written."""


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


def _distinct(values: list[str]) -> list[str]:
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise PydanticCustomError(
            "listed_twice", "{name} is listed twice: name each once", {"name": repr(twice[0])}
        )
    return values


def _string_keys(value: object) -> object:
    # YAML reads `0:` as an int key; exit and status maps are keyed by strings.
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


_StringKeys = BeforeValidator(_string_keys)
_ExitMap = Annotated[dict[Annotated[str, Field(pattern=_EXIT_PATTERN)], _Name], _StringKeys]
_StatusMap = Annotated[dict[Annotated[str, Field(pattern=STATUS_PATTERN)], _Name], _StringKeys]


def _well_formed(template: str) -> str:
    """A ``{name}`` template: plain names only (no attributes, indexes, specs, positions)."""
    try:
        template_parts(template)
    except ValueError as exc:
        raise PydanticCustomError(
            "template",
            "{template} is not a valid template: {reason} (write {{ or }} for a literal brace)",
            {"template": repr(template)[:200], "reason": str(exc)},
        ) from None
    return template


def _templates_within(value: Any) -> Any:
    """Check every string inside ``value`` (a payload or body) as a template."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _well_formed(item)
        elif isinstance(item, Mapping):
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return value


_Template = Annotated[str, AfterValidator(_well_formed)]
_Templates = AfterValidator(_templates_within)
_Header = Annotated[str, Field(pattern=HEADER_PATTERN)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BudgetSpec(_Spec):
    """A named counter with a limit; every entry into a `spend_on` state spends one unit."""

    limit: int = Field(ge=0, description="Units available (a node's with.budgets may override).")
    spend_on: list[_Name] = Field(
        description="States whose every entry spends one; [] for a budget only actions spend "
        "(an llm action spends `tokens`)."
    )


_ROLES = {"final": "final", "hook": "hooked", "machine": "nesting a machine"}
_ONE_ROLE = {"not": {"anyOf": [{"required": list(pair)} for pair in combinations(_ROLES, 2)]}}


class StateSpec(_Spec):
    """A state: final, hooked (runs the action a graph binds), or nesting a machine."""

    model_config = ConfigDict(json_schema_extra=_ONE_ROLE)  # type: ignore[typeddict-item]

    final: _Outcome | None = Field(None, description="Node outcome when the machine ends here.")
    hook: _Name | None = Field(None, description="Slot a graph binds; default: the state name.")
    machine: _Ident | None = Field(None, description="Nested machine; its outcome is the trigger.")
    retries: _Name | None = Field(
        None,
        description="A state with the same hook whose call this state makes again (a "
        "recovery's retry): its action keeps that call's effect ids (Idempotency-Key).",
    )
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


_StatePath = Annotated[str, Field(pattern=STATE_PATH_PATTERN)]


class ExampleStepSpec(_Spec):
    """One step of an example written out: the trigger, what guards read, where it leads."""

    trigger: _Name = Field(description="The trigger fired (an action's result).")
    payload: dict[str, bool] = Field(
        {}, description="Truth of the `payload:` predicates the guards read."
    )
    to: _StatePath = Field(description="The state path entered (`parent/child` when nested).")
    times: int = Field(
        1,
        ge=1,
        le=100_000,
        description="How often the step repeats in a row, each time entering `to` (a "
        "budget run out at a default limit of 1000 is one step with `times: 1000`).",
    )


def _step_shape(v: Any) -> str:
    return "<map>" if isinstance(v, Mapping | ExampleStepSpec) else "<one>"


_Step = Annotated[
    Annotated[Annotated[str, Field(pattern=STEP_PATTERN)], Tag("<one>")]
    | Annotated[ExampleStepSpec, Tag("<map>")],
    Discriminator(_step_shape),
]


class ExampleSpec(_Spec):
    """An intended behaviour: triggers fired from the initial state, and where they lead.

    ``phasegraph test`` fires each step on the machine as a run does (guards, budgets,
    nested machines, final states) and fails when the machine goes anywhere else.
    """

    name: str = Field(min_length=1, description="What the example shows, in words.")
    settings: dict[str, Any] = Field(
        {},
        alias="with",
        description="The node's settings the guards read (`budgets:` overrides limits).",
    )
    steps: list[_Step] = Field(
        min_length=1,
        description="In order: 'TRIGGER -> STATE' (a nested state as parent/child), or "
        "{trigger, payload, to} when guards read the payload.",
    )
    outcome: _Outcome | None = Field(
        None,
        description="How the node ends after the last step; omit it when the example stops "
        "before the node ends.",
    )
    spent: dict[_StatePath, Annotated[int, Field(ge=0)]] | None = Field(
        None,
        description="Units spent per budget after the last step (a nested level's as "
        "state/budget).",
    )


def step_parts(step: str | ExampleStepSpec) -> tuple[str, dict[str, bool], str]:
    """The trigger, payload and state path of a step, in either of its forms."""
    if isinstance(step, ExampleStepSpec):
        return step.trigger, dict(step.payload), step.to
    trigger, _, to = step.partition("->")
    return trigger.strip(), {}, to.strip()


def step_times(step: str | ExampleStepSpec) -> int:
    """How often a step repeats in a row (``times:``; once for ``TRIGGER -> STATE``)."""
    return step.times if isinstance(step, ExampleStepSpec) else 1


class MachineSpec(_Spec):
    """A phasegraph machine file (states/NAME.yaml)."""

    model_config = ConfigDict(title="phasegraph machine")

    machine: _Ident | None = Field(None, description="Machine name; default: the file stem.")
    description: str = Field("", description="What the machine is for.")
    initial: _Name = Field(description="The state a node starts in.")
    budgets: dict[_Name, BudgetSpec] = Field({}, description="Budgets by name.")
    states: dict[_Name, StateSpec] = Field(min_length=1, description="States, in order.")
    transitions: list[TransitionSpec] = Field([], description="Transitions, in priority order.")
    examples: list[ExampleSpec] = Field(
        [],
        description="Intended behaviours, run by `phasegraph test`: each a path from the "
        "initial state and how the node ends.",
    )


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
        """The action kind: one of :data:`ACTION_KINDS`."""
        return next(kind for kind in ACTION_KINDS if kind in type(self).model_fields)


class _Effects(_Spec):
    """What running the action (or a tool call) again does, and what a resume does about it."""

    on_unknown: Literal["ask", "retry", "fail", "reconcile"] = Field(
        "ask",
        description="A once effect whose intent has no committed result after a crash: ask a "
        "person (a gate), retry with the same effect id, fail the node, or reconcile.",
    )
    reconcile: str | None = Field(
        None,
        pattern=TARGET_PATTERN,
        description='"module:function" that looks an uncertain effect up (on_unknown: '
        "reconcile): returns its result if it happened, None if it did not.",
    )

    @pydantic.model_validator(mode="after")
    def _reconciler_named(self) -> _Effects:
        if (self.on_unknown == "reconcile") != (self.reconcile is not None):
            raise PydanticCustomError(
                "reconcile_pair",
                "on_unknown: reconcile needs reconcile: module:function, and reconcile is only "
                "read with on_unknown: reconcile",
            )
        return self


_EffectKind = Literal["none", "idempotent", "once"]


class _ActionEffects(_Effects):
    effect: _EffectKind | None = Field(
        None,
        description="none (reads), idempotent (same effect id, same outcome) or once (must not "
        "happen twice: its intent is committed first). Default: once for an http POST or "
        "PATCH, idempotent otherwise.",
    )


class PythonAction(_ActionBase, _ActionEffects):
    """Call "module:function" (sync or async) with the action context."""

    python: str = Field(pattern=TARGET_PATTERN, description='The callable, "module:function".')
    thread: bool = Field(True, description="Run a sync function in a worker thread.")
    triggers: list[_Name] | None = Field(None, description="Triggers the function may return.")

    def _implied(self) -> list[tuple[Loc, str]]:
        # Unlisted triggers of a function of the user's own are unknown; ours are known.
        return [(("python",), trigger) for trigger in CONCERN_TRIGGERS.get(self.python, ())]


_Command = Annotated[
    Annotated[str, Field(min_length=1), Tag("<one>")]
    | Annotated[list[str], Field(min_length=1), Tag("<many>")],
    Discriminator(_shape),
]


class ShellAction(_ActionBase, _ActionEffects):
    """Run a command without a shell: an argv list, or one string split like a shell does."""

    shell: Annotated[_Command, _Templates] = Field(
        description="argv list or command line; {name} templates."
    )
    cwd: _Template | None = Field(None, description="Working directory (a template).")
    env: dict[str, _Template] = Field({}, description="Extra environment variables (templates).")
    on_exit: _ExitMap = Field({"0": "ok", "default": "fail"}, description="Exit status -> trigger.")
    timeout_trigger: _Name | None = Field(
        None, description="Trigger on timeout (default: default)."
    )
    capture: _NonEmpty | None = Field(None, description="Data key that receives the stdout.")

    def _implied(self) -> list[tuple[Loc, str]]:
        found: list[tuple[Loc, str]] = [(("on_exit", k), v) for k, v in self.on_exit.items()]
        if self.timeout_trigger is not None:
            found.append((("timeout_trigger",), self.timeout_trigger))
        if "default" not in self.on_exit:
            # Every status the map leaves out (a red test run's 1, a missing program's 127)
            # fires the fallback: it is as much a trigger of this action as any listed one.
            found.append(((*FALLBACK, "on_exit"), SHELL_FALLBACK_TRIGGER))
        return found


class HttpRequest(_Spec):
    """The request an http action sends: url, headers and body are {name} templates."""

    url: Annotated[str, Field(pattern=URL_PATTERN), AfterValidator(_well_formed)] = Field(
        description="Absolute http(s) URL; {name} values are percent-encoded into it."
    )
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field(
        "GET", description="Verb."
    )
    headers: dict[_Header, _Template] = Field(
        {}, description="Request headers; values are templates over input and data."
    )
    headers_from_env: dict[_Header, _Template] = Field(
        {},
        description="Secret headers: values are templates over environment variables, e.g. "
        "'Bearer {API_TOKEN}'; never written to the run's record.",
    )
    body: Annotated[Any, _Templates] = Field(
        None, description="Request body (templates): a string is sent as is, anything else as JSON."
    )

    @pydantic.model_validator(mode="after")
    def _headers_once(self) -> HttpRequest:
        plain = {name.lower() for name in self.headers}
        twice = [name for name in self.headers_from_env if name.lower() in plain]
        if twice:
            raise PydanticCustomError(
                "header_twice",
                "header {name} is in both headers and headers_from_env: keep one",
                {"name": repr(twice[0])},
            )
        return self


class HttpAction(_ActionBase, _ActionEffects):
    """Send an HTTP request (redirects are not followed); the response status picks the trigger."""

    timeout: float = Field(
        30.0, gt=0, description="Seconds before the request is abandoned (a timeout error)."
    )
    http: HttpRequest = Field(description="The request to send.")
    on_status: _StatusMap = Field(
        {"2xx": "ok", "default": "fail"},
        description="Status -> trigger: a code ('404'), then its class ('4xx'), then 'default'.",
    )
    capture: _NonEmpty | None = Field(
        None, description="Data key that receives the response: parsed JSON, else its text."
    )
    triggers: list[_Name] | None = Field(None, description="Triggers (default: on_status values).")

    def _implied(self) -> list[tuple[Loc, str]]:
        return [(("on_status", key), trigger) for key, trigger in self.on_status.items()]


_BusyPolicy = Literal["reject", "enqueue", "interrupt", "rollback"]


class BusySpec(_Spec):
    """That a graph's runs take messages, and what one does while the run is busy."""

    policy: _BusyPolicy = Field(
        description="While the run is busy: reject (refused, naming the step), enqueue "
        "(kept in the run's inbox until a gate takes it), interrupt (the action in flight "
        "is cut short and the busy node takes it) or rollback (the turn in flight is "
        "discarded and the gate that began it takes it)."
    )
    trigger: _Name = Field(
        "message", description="The trigger a message fires on the node that takes it."
    )


class HumanAction(_ActionBase):
    """Pause the run on an interrupt until someone replies (or the timeout fires)."""

    human: _Ident = Field(description="The interrupt kind, e.g. review.")
    payload: Annotated[dict[str, Any], _Templates] = Field(
        {}, description="What the answerer sees; strings are {name} templates."
    )
    park: bool = Field(False, description="While it waits, the run is parked (not waiting).")
    triggers: list[_Name] | None = Field(None, description="Replies accepted (and timeout).")
    reviewers: Annotated[list[_Reviewer], AfterValidator(_distinct)] | None = Field(
        None,
        min_length=1,
        description="Who may answer: principal names and group:NAME entries "
        "(default: anyone who may reply).",
    )
    busy: _BusyPolicy | None = Field(
        None,
        description="For a gate that takes messages (the graph's busy: trigger): what a "
        "message does while its node is busy, in place of the graph's busy: policy.",
    )


class ResponseFormat(_Spec):
    """Structured output: the answer must be JSON matching a JSON Schema.

    Sent as the API's ``json_schema`` response format (servers that enforce it with a
    grammar produce nothing else); the answer is validated again when it comes back.
    """

    json_schema: dict[str, Any] = Field(
        alias="schema", description="The JSON Schema (2020-12) the answer must match."
    )
    name: _Name = Field("answer", description="The schema's name, as the API asks for one.")
    strict: bool = Field(True, description="Ask the server to follow the schema strictly.")
    attempts: int = Field(
        2,
        ge=1,
        le=5,
        description="Answers asked for in one step: one that does not match is shown to the "
        "model with why, and it answers again.",
    )

    @pydantic.model_validator(mode="after")
    def _valid_schema(self) -> ResponseFormat:
        error = json_schema_error(self.json_schema)
        if error is not None:
            raise PydanticCustomError(
                "response_schema", "schema: not a valid JSON Schema: {error}", {"error": error}
            )
        return self


TOOL_CHOICES = ("auto", "none", "required")
"""The ``tool_choice`` words; any other value names one tool the model must call."""


class LlmRequest(_Spec):
    """One chat-completion call against an OpenAI-compatible endpoint."""

    model: _NonEmpty = Field(description="The model name the endpoint serves.")
    system: _Template | None = Field(None, description="System message (a template).")
    prompt: _Template | None = Field(
        None,
        description="User message added before the call (a template; {payload[KEY]} reads the "
        "entering trigger's payload), when the conversation is empty or ends with an answer.",
    )
    conversation: _NonEmpty = Field(
        "conversation", description="Data key holding the message list the answer is appended to."
    )
    tools: list[_Name] = Field(
        [], description="Tools the model may call (those the current phase refuses are hidden)."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Longest answer, in tokens.")
    auxiliary_model: _NonEmpty | None = Field(
        None, description="Cheaper model that writes compression summaries (main model fallback)."
    )
    context_tokens: int | None = Field(
        None, ge=64, description="Compress older turns when a request nears this many tokens."
    )
    keep_recent: int = Field(6, ge=1, description="Messages a compression keeps word for word.")
    stream: bool = Field(False, description="Stream the answer (live llm_delta events).")
    retries: int = Field(2, ge=0, le=10, description="Retries of 429/5xx/timeouts (Retry-After).")
    tool_choice: _Name | None = Field(
        None,
        description="Whether the model must call a tool: auto, none, required, or the name of "
        "one of `tools` it must call. An answer that does not comply is shown to the model "
        "with why, and it answers again.",
    )
    parallel_tool_calls: bool | None = Field(
        None, description="Whether the model may call several tools in one answer."
    )
    response_format: ResponseFormat | None = Field(
        None, description="The answer must be JSON matching a schema (structured output)."
    )

    @pydantic.model_validator(mode="after")
    def _choice_offered(self) -> LlmRequest:
        choice = self.tool_choice
        if choice not in (None, "auto", "none") and not self.tools:
            raise PydanticCustomError(
                "tool_choice", "tool_choice {choice} needs tools to call", {"choice": repr(choice)}
            )
        if choice is not None and choice not in TOOL_CHOICES and choice not in self.tools:
            raise PydanticCustomError(
                "tool_choice",
                "tool_choice {choice} is neither auto, none nor required, nor one of the "
                "tools offered ({tools})",
                {"choice": repr(choice), "tools": ", ".join(self.tools)},
            )
        if self.parallel_tool_calls is not None and not self.tools:
            raise PydanticCustomError(
                "parallel_tool_calls", "parallel_tool_calls needs tools to call", {}
            )
        return self


_OUTCOME_KEYS = Literal["answer", "tool_calls", "compressed", "budget_out"]


class LlmAction(_ActionBase):
    """Ask a model once; fires tool_calls, answer or compressed (renamed by `on_outcome`)."""

    timeout: float = Field(120.0, gt=0, description="Seconds one request may take.")
    llm: LlmRequest = Field(description="The request.")
    on_outcome: dict[_OUTCOME_KEYS, _Name | None] = Field(
        {},
        description="Outcome -> trigger (answer, tool_calls, compressed, budget_out); null: "
        "never expected (compressed: null turns compression off). budget_out fires when the "
        "run's budget cannot reserve the call; unmapped, the run's budget gate asks a person.",
    )

    def _implied(self) -> list[tuple[Loc, str]]:
        possible = ["answer", *(["tool_calls"] if self.llm.tools else []), "compressed"]
        if self.on_outcome.get("budget_out") is not None:
            possible.append("budget_out")
        found: list[tuple[Loc, str]] = []
        for outcome in possible:
            trigger = self.on_outcome.get(outcome, outcome)  # type: ignore[call-overload]
            if trigger is not None:
                where = ("on_outcome", outcome) if outcome in self.on_outcome else ("llm",)
                found.append((where, trigger))
        return found


class ToolsAction(_ActionBase, _Effects):
    """Run the tool calls of the conversation's last assistant message; fires observed."""

    tools: _NonEmpty = Field(description="Data key of the conversation.")
    cwd: _Template | None = Field(
        None,
        description="Folder every call works in (a template, e.g. {repo}): the model's "
        "relative paths resolve there and no call leaves it.",
    )

    on_outcome: dict[Literal["observed", "advance"], _Name | None] = Field(
        {},
        description="Outcome -> trigger (observed, advance); advance: null answers an advance "
        "call without ending the loop (for a state that takes no advance).",
    )

    def _implied(self) -> list[tuple[Loc, str]]:
        found: list[tuple[Loc, str]] = []
        for outcome in ("observed", "advance"):
            trigger = self.on_outcome.get(outcome, outcome)
            if trigger is not None:
                where = ("on_outcome", outcome) if outcome in self.on_outcome else ("tools",)
                found.append((where, trigger))
        return found


class PlanConcurrency(_Spec):
    """A limit read from the run: the value of an input or data key, else a default."""

    key: _NonEmpty = Field(description="Input or data key holding the limit (data wins).")
    default: int = Field(ge=1, description="The limit when the run has no such key.")


class TemplateSpec(_Spec):
    """The node each item of a plan becomes: a node without id or needs of its own."""

    machine: _Ident = Field(description="Built-in machine name, or one from `machines:`.")
    writes: list[_NonEmpty] | None = Field(
        None,
        description="Top-level data keys each child writes (children that may run "
        "at the same time need a reducer for each).",
    )
    settings: dict[str, Any] = Field(
        {}, alias="with", description="Settings of every child; an item's fields are added."
    )
    bind: dict[_Name, ActionSpec] = Field({}, description="Hook -> action; bind every hook.")


class PlanSpec(_Spec):
    """Where a node's plan is read and how each item becomes a child node."""

    source: _NonEmpty = Field(
        alias="from", description="Data key an earlier step wrote the plan to."
    )
    items: _NonEmpty | None = Field(
        None,
        description="Key of the plan holding the list of items; default: the plan is the list.",
    )
    id: _NonEmpty | None = Field(
        None,
        description="Item field naming each item (letters, digits, _ and -); default: items "
        "are numbered 0, 1, ... (a map).",
    )
    needs: _NonEmpty | None = Field(
        None, description="Item field listing the ids of the siblings it needs; default: none."
    )
    called: _Name = Field(
        "item", description="What an item is called in messages about the plan (e.g. phase)."
    )
    settings: dict[str, Any] | None = Field(
        None,
        description="JSON Schema of an item's other fields, which become the child's "
        "settings; default: items carry none.",
    )
    max_items: int = Field(1000, ge=0, description="A plan with more items is refused.")
    concurrency: Annotated[int, Field(ge=1)] | PlanConcurrency | None = Field(
        None,
        description="How many children may be in flight at once (started and not ended: one "
        "waiting at a gate or for a child run counts); default: the graph's concurrency.",
    )
    result: _NonEmpty | None = Field(
        None, description="Data key each child writes its result to (kept on the child)."
    )
    into: _NonEmpty | None = Field(
        None, description="Data key the node writes its children's results to, in plan order."
    )
    template: TemplateSpec = Field(description="The node each item becomes.")

    @pydantic.model_validator(mode="after")
    def _result_and_into(self) -> PlanSpec:
        if (self.result is None) != (self.into is None):
            raise PydanticCustomError(
                "plan_results",
                "`result` and `into` go together: each child writes `result`, and the "
                "node gathers them into `into`",
                {},
            )
        return self


class PlanAction(_ActionBase):
    """Turn the plan an earlier step wrote into child nodes; fires done, failed or refused."""

    plan: PlanSpec = Field(description="The plan and its template.")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _no_timeout(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "timeout" in value:
            raise PydanticCustomError(
                "plan_timeout",
                "a plan binding takes no `timeout`: it waits for its children, whose actions "
                "take timeouts of their own (set them in the template's `bind`)",
                {},
            )
        return value

    def _implied(self) -> list[tuple[Loc, str]]:
        return [(("plan",), trigger) for trigger in PLAN_TRIGGERS]


class ChildGraphSpec(_Spec):
    """The graph a ``graph:`` binding runs as a run of its own, its input, and its results."""

    graph: _NonEmpty = Field(
        description="Built-in graph name, or a graph file (relative to this file)."
    )
    input: Annotated[dict[str, Any], _Templates] = Field(
        {},
        description="The child run's input: {name} templates over the run's input and data "
        "(a plan's child adds {item}); a value that is one placeholder alone passes the value "
        "itself (a number, a list, an item), not its text.",
    )
    into: _NonEmpty | None = Field(
        None,
        description="Data key the child run's `output:` keys are written to, as a mapping, "
        "when it completes.",
    )


class GraphAction(_ActionBase):
    """Run a graph as a run of its own and wait for it; fires completed or failed."""

    graph: ChildGraphSpec = Field(description="The graph to run, its input and its results.")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _no_timeout(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "timeout" in value:
            raise PydanticCustomError(
                "graph_timeout",
                "a graph binding takes no `timeout`: its child run's actions take timeouts "
                "of their own (set them in that graph)",
                {},
            )
        return value

    def _implied(self) -> list[tuple[Loc, str]]:
        return [(("graph",), trigger) for trigger in CHILD_TRIGGERS]


ActionSpec = Annotated[
    Annotated[PythonAction, Tag("<python>")]
    | Annotated[ShellAction, Tag("<shell>")]
    | Annotated[HttpAction, Tag("<http>")]
    | Annotated[HumanAction, Tag("<human>")]
    | Annotated[LlmAction, Tag("<llm>")]
    | Annotated[ToolsAction, Tag("<tools>")]
    | Annotated[PlanAction, Tag("<plan>")]
    | Annotated[GraphAction, Tag("<graph>")],
    Discriminator(_action_kind, custom_error_type="action_kind", custom_error_message="kind"),
]
"""One action: exactly one of the kind keys python, shell, http, human, llm, tools, plan,
graph."""

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

    @pydantic.model_validator(mode="after")
    def _review_timeout(self) -> NodeSpec:
        # The one setting the engine reads itself (a spec review's default deadline).
        value = self.settings.get("review_timeout")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise PydanticCustomError(
                "review_timeout",
                "with.review_timeout must be a number of seconds >= 0, not {value}",
                {"value": repr(value)},
            )
        return self


_ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
"""An MCP tool the graph takes: a name chat APIs accept for a function."""


class McpServerSpec(_Spec):
    """An MCP server the graph takes tools from: a stdio command or a streamable HTTP URL.

    Every string is a {name} template over the run's input and data, rendered when the
    run first uses the server.
    """

    command: list[_Template] | None = Field(
        None, min_length=1, description="argv of a server spoken to over stdio (no shell)."
    )
    env: dict[_NonEmpty, _Template] = Field(
        {}, description="Environment variables for the command, beside PATH, HOME and the like."
    )
    cwd: _Template | None = Field(None, description="The command's working folder.")
    url: Annotated[str, Field(pattern=URL_PATTERN), AfterValidator(_well_formed)] | None = Field(
        None, description="The endpoint of a server spoken to over streamable HTTP."
    )
    headers: dict[_Header, _Template] = Field({}, description="HTTP headers sent to `url`.")
    timeout: float = Field(60.0, gt=0, description="Seconds a tool call may take.")
    start_timeout: float = Field(
        30.0, gt=0, description="Seconds to start the server and list its tools."
    )
    tools: list[_ToolName] = Field(min_length=1, description="The tools taken from this server.")
    effects: dict[_ToolName, _EffectKind] = Field(
        {},
        description="Tool -> what calling it again does; default: the server's hints "
        "(readOnlyHint: none, idempotentHint: idempotent), else once.",
    )

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise PydanticCustomError(
                "mcp_transport", "an MCP server needs exactly one of `command` and `url`", {}
            )
        stray = [key for key in ("env", "cwd") if getattr(self, key)] if self.url else []
        stray += ["headers"] if self.command and self.headers else []
        if stray:
            raise PydanticCustomError(
                "mcp_transport",
                "{keys} applies to the other transport (`command`: env, cwd; `url`: headers)",
                {"keys": ", ".join(f"`{key}`" for key in stray)},
            )
        unknown = sorted(set(self.effects) - set(self.tools))
        if unknown:
            raise PydanticCustomError(
                "mcp_effects",
                "effects names {names}, not in this server's `tools`",
                {"names": ", ".join(map(repr, unknown))},
            )
        return self


class PriceSpec(_Spec):
    """A model's price per million tokens, in the price table's currency."""

    input: float = Field(ge=0, description="Price of a million prompt tokens.")
    output: float = Field(ge=0, description="Price of a million completion tokens.")


class SpendSpec(_Spec):
    """The run's budget for model calls: every call reserves its most before it is sent."""

    tokens: int | None = Field(
        None, ge=1, description="The most tokens the run's model calls may spend together."
    )
    money: float | None = Field(
        None, gt=0, description="The most the run's model calls may cost, priced by `prices`."
    )
    prices: dict[_NonEmpty, PriceSpec] = Field(
        {}, description="Model name -> its price per million prompt and completion tokens."
    )
    required: bool = Field(
        False,
        description="`check` proves every model call sits under a finite limit here, and "
        "names each call that does not.",
    )


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
    mcp: dict[_Ident, McpServerSpec] = Field(
        {}, description="MCP servers by name, and the tools the graph takes from each."
    )
    nodes: list[NodeSpec] = Field(min_length=1, description="The nodes, in declaration order.")
    output: list[_NonEmpty] = Field(
        [], description="Data keys that are the run's result, shown when it ends."
    )
    busy: _BusyPolicy | BusySpec | None = Field(
        None,
        description="Runs take messages (phasegraph send, POST /runs/ID/messages): what one "
        "does while the run is busy, as a policy or {policy, trigger}; default: none taken.",
    )
    budget: SpendSpec | None = Field(
        None, description="The run's budget for model calls, in tokens and money."
    )


TemplateSpec.model_rebuild()  # its bindings may hold a plan of their own
