"""Tools that actions call through ``ctx.tool(name, **arguments)``, under per-phase rules.

A :class:`ToolFactory` is built once per prepared graph; for each action call it binds a
:class:`~phasegraph.actions.ToolCall` to the node, its current state and the step's event
sink. A node's ``with`` may declare rules per phase (a phase is a state name of the
node's machine, nested ones included)::

    with:
      workspace: ./work            # optional: no tool reaches outside this folder
      phases:                      # optional: without it every tool is allowed
        planning:     {tools: [read_file, list_files], deny_commands: [rm, mv, ">", ">>"]}
        verification: {tools: [read_file, run_command], allow_commands: [pytest, git]}
        delivery:     {tools: "*"}
        "*":          {tools: [read_file]}     # optional: every state not listed above

``phases: solo`` names a preset (see :data:`PRESETS`). Tools from the graph's MCP servers
(:mod:`phasegraph.tools._mcp`) are named in ``tools`` lists like built-in ones.

``advance`` is a tool too, for agents: calling it asks to move on to the next phase (the
``tools:`` action fires the ``advance`` trigger). It is allowed only where a phase lists
it by name (``"*"`` does not include it), or everywhere when the node has no phase rules.

The phase of a call is the innermost state of the node's path that ``phases`` lists (so a
phase whose state nests another machine covers that machine's states too). When
``phases`` is given, a state it does not cover (and no ``"*"`` entry) allows no tool.
A call the phase does not allow is not dispatched: the caller gets
``{"error": "phase_violation", "tool", "phase", "allowed", "message"}`` and a
``phase_violation`` event is recorded with the step. ``run_command`` takes an argv list
(never a shell string); its command filter refuses a word of the command (or of a script
passed to a shell such as ``sh -c``) that ``deny_commands`` names, and a program that
``allow_commands`` (when given) does not name. The filter judges words, not effects: it
is a guard against an agent's habits, not a sandbox.

Every tool takes an optional ``cwd``: the folder relative paths resolve against and the
root the call may not leave (symlinks are resolved first). Expected failures (a missing
file, a path outside the root) come back as ``{"error": CODE, "message": ...}``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import shlex
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from phasegraph._extras import install_hint
from phasegraph.actions import EventSink, ToolCall, declare_effect, effect_of
from phasegraph.actions._base import CALL_EFFECT_ID, CALL_STARTING
from phasegraph.errors import ActionError, Problem, SpecError
from phasegraph.model import (
    EMPTY,
    PATH_SEPARATOR,
    Effect,
    GraphDef,
    NodeDef,
    RunState,
    empty_field,
    nested_machines,
)
from phasegraph.spec._suggest import did_you_mean
from phasegraph.tools._builtins import BUILTIN_TOOLS, Scope, Tool, ToolRefused, error_result
from phasegraph.tools._schemas import describe_tool

if TYPE_CHECKING:
    from phasegraph.tools._mcp._servers import McpServers


__all__ = [
    "ADVANCE_TOOL",
    "ALL_TOOLS",
    "BUILTIN_TOOLS",
    "PHASE_VIOLATION",
    "PRESETS",
    "PhaseRule",
    "ToolFactory",
    "ToolPolicy",
    "advance",
    "build_tools",
    "command_violation",
    "parse_policy",
    "scope_of_call",
]

PHASE_VIOLATION = "phase_violation"
"""The error code of a refused call, and the kind of the event it records."""

ADVANCE_TOOL = "advance"
"""The tool an agent calls to move to the next phase; allowed only where listed by name."""

ALL_TOOLS = "*"
"""``tools: "*"`` allows every tool; a ``"*"`` phase covers every state not listed."""

_READ_ONLY = {"deny_commands": ["rm", "mv", ">", ">>"]}

PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "solo": MappingProxyType(
            {
                "planning": {
                    "tools": ["read_file", "list_files", "run_command", ADVANCE_TOOL],
                    **_READ_ONLY,
                },
                "building": {
                    "tools": ["read_file", "write_file", "list_files", "run_command", ADVANCE_TOOL]
                },
                "verification": {
                    "tools": ["read_file", "list_files", "run_command", ADVANCE_TOOL],
                    **_READ_ONLY,
                },
                "delivery": {"tools": ALL_TOOLS},
            }
        )
    }
)
"""Named rule sets: ``with: {phases: solo}`` reads in planning and verification (no
``rm``, ``mv`` or redirections there), writes in building, and allows everything in
delivery; ``advance`` in every phase but delivery."""

_SHELL_CHARS = frozenset(" \t\n;&|<>()$`")


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseRule:
    """What one phase allows.

    Attributes:
        tools: Allowed tool names; ``None`` allows every tool.
        deny_commands: Words no ``run_command`` of this phase may contain.
        allow_commands: Programs ``run_command`` may start; ``None`` allows any.
    """

    tools: frozenset[str] | None = None
    deny_commands: frozenset[str] = frozenset()
    allow_commands: frozenset[str] | None = None

    def allowed(self, known: Sequence[str]) -> list[str]:
        """The allowed tool names, sorted (``"*"`` allows every tool but ``advance``)."""
        if self.tools is None:
            return sorted(name for name in known if name != ADVANCE_TOOL)
        return sorted(self.tools)

    def allows(self, name: str) -> bool:
        """Whether tool ``name`` may be called in this phase (commands aside)."""
        return name != ADVANCE_TOOL if self.tools is None else name in self.tools


_DENY_ALL = PhaseRule(tools=frozenset())


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPolicy:
    """A node's tool rules, parsed from its ``with`` block.

    Attributes:
        phases: State name (or ``"*"``) → rule; empty means no phase rules at all.
        workspace: The folder no call may leave, if any.
    """

    phases: Mapping[str, PhaseRule] = empty_field()
    workspace: str | None = None

    def phase(self, path: Sequence[str]) -> tuple[str, PhaseRule | None]:
        """The phase of a call made in state ``path`` and its rule (None: unrestricted)."""
        if not self.phases:
            return (path[-1] if path else ""), None
        for name in reversed(path):
            if name in self.phases:
                return name, self.phases[name]
        return (path[-1] if path else ""), self.phases.get(ALL_TOOLS, _DENY_ALL)


def _words(argv: Sequence[str]) -> list[str]:
    """Every word of a command, including the words of scripts handed to a shell."""
    words = [str(a) for a in argv]
    for argument in argv[1:]:
        if _SHELL_CHARS & set(str(argument)):
            lexer = shlex.shlex(str(argument), posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            try:
                words += list(lexer)
            except ValueError:  # unbalanced quotes: judge the raw words only
                continue
    return words


def command_violation(rule: PhaseRule, argv: Sequence[str]) -> str | None:
    """The word that makes ``argv`` illegal under ``rule``, or None if it is allowed."""
    program = Path(str(argv[0])).name
    if rule.allow_commands is not None and program not in rule.allow_commands:
        return program
    for word in _words(argv):
        if word in rule.deny_commands or Path(word).name in rule.deny_commands:
            return word
    return None


def _violation(
    tool: str, phase: str, allowed: list[str], message: str, **extra: Any
) -> dict[str, Any]:
    return {
        "error": PHASE_VIOLATION,
        "tool": tool,
        "phase": phase,
        "allowed": allowed,
        "message": message,
        **extra,
    }


def _check(
    name: str, arguments: Mapping[str, Any], phase: str, rule: PhaseRule, known: Sequence[str]
) -> dict[str, Any] | None:
    allowed = rule.allowed(known)
    if not rule.allows(name):
        message = (
            f"tool {name!r} is not allowed in phase {phase!r} "
            f"(allowed: {', '.join(allowed) or 'none'}); advance to a phase that allows it"
        )
        return _violation(name, phase, allowed, message)
    argv = arguments.get("argv")
    if name != "run_command" or not argv or isinstance(argv, str):
        return None
    word = command_violation(rule, argv)
    if word is None:
        return None
    message = f"command {word!r} is not allowed in phase {phase!r}"
    return _violation(name, phase, allowed, message, command=list(argv), denied=word)


# --------------------------------------------------------------------------- binding


class ToolFactory:
    """Binds tool calls to a node and its state; built once per prepared graph.

    Args:
        tools: Tool name → tool.
        policies: Node id → its parsed rules (nodes without rules are unrestricted).
        servers: The graph's MCP servers, whose tools join ``tools``.
    """

    def __init__(
        self,
        tools: Mapping[str, Tool],
        policies: Mapping[str, ToolPolicy] | None = None,
        servers: McpServers | None = None,
    ) -> None:
        self._tools = MappingProxyType({**tools, ADVANCE_TOOL: advance})
        self._signatures = {name: inspect.signature(tool) for name, tool in self._tools.items()}
        self._described: dict[str, Mapping[str, Any]] = {}
        self._policies = MappingProxyType(dict(policies or {}))
        self._unrestricted = ToolPolicy()
        self._servers = servers
        served = () if servers is None else servers.tools
        self._names = tuple(sorted([*self._tools, *served]))

    @property
    def servers(self) -> McpServers | None:
        """The graph's MCP servers and their sessions (None: the graph has no ``mcp:``)."""
        return self._servers

    def with_nodes(self, nodes: Iterable[NodeDef], definition: GraphDef) -> ToolFactory:
        """This factory, knowing the rules of ``nodes`` too (the children of a plan).

        The MCP servers are shared, so a run's sessions stay the ones it opened. The
        rules were judged when the graph was prepared (on the plan's template).
        """
        policies = dict(self._policies)
        for node in nodes:
            policy, _ = parse_policy(node, definition, self._names)
            if policy is not None:
                policies[node.id] = policy
        tools = {name: tool for name, tool in self._tools.items() if name != ADVANCE_TOOL}
        return ToolFactory(tools, policies, self._servers)

    @property
    def names(self) -> tuple[str, ...]:
        """The known tool names (built-in, given and from MCP servers), sorted."""
        return self._names

    async def offered(
        self, node: NodeDef, state: str, run: RunState | None, wanted: Sequence[str]
    ) -> list[Mapping[str, Any]]:
        """Descriptions of the ``wanted`` tools that ``node`` may call in ``state``.

        What a model is shown: a tool the current phase refuses is left out. An MCP
        tool is described from its server's listing: the first description starts the
        server in ``run``'s session.

        Raises:
            ActionError: A wanted name is not a known tool, or its server cannot start.
        """
        policy = self._policies.get(node.id, self._unrestricted)
        _, rule = policy.phase(state.split(PATH_SEPARATOR) if state else ())
        offered = []
        for name in wanted:
            self._known(name, node)
            if rule is not None and not rule.allows(name):
                continue
            if name not in self._described:
                tool = self._tools.get(name)
                if tool is not None:
                    self._described[name] = describe_tool(name, tool)
                else:
                    assert self._servers is not None  # _known found it
                    run_id, values = _run_values(run)
                    self._described[name] = await self._servers.describe(run_id, values, name)
            offered.append(self._described[name])
        return offered

    def _known(self, name: str, node: NodeDef) -> None:
        if name not in self._tools and (self._servers is None or name not in self._servers):
            known = ", ".join(self.names) or "none"
            raise ActionError(f"unknown tool {name!r} (known: {known})", node_id=node.id)

    def effect(self, name: str) -> Effect:
        """What calling tool ``name`` again does (see :class:`~phasegraph.model.Effect`).

        A built-in or given tool declares it (:func:`~phasegraph.actions.declare_effect`;
        undeclared: ``once``). An MCP tool has the kind its server's ``effects:`` entry
        declares, else the one its server's hints give (``readOnlyHint``: none,
        ``idempotentHint``: idempotent) once a run has listed the server's tools, else
        ``once``. A name no tool has is ``once`` too (the call will be refused).
        """
        tool = self._tools.get(name)
        if tool is not None:
            return effect_of(tool)
        if self._servers is None or name not in self._servers:
            return Effect.ONCE
        return self._servers.effect(name)

    @property
    def has_servers(self) -> bool:
        """Whether the graph takes tools from MCP servers (whose sessions a run closes)."""
        return self._servers is not None

    async def close_run(self, run_id: str) -> None:
        """Close run ``run_id``'s sessions with MCP servers (their processes end)."""
        if self._servers is not None:
            await self._servers.close_run(run_id)

    def bind(
        self, node: NodeDef, state: str, emit: EventSink, run: RunState | None = None
    ) -> ToolCall:
        """A tool caller for one action call of ``node`` in ``state`` (a path string)."""
        return self.binder(node, state)(emit, run)

    def binder(self, node: NodeDef, state: str) -> Callable[[EventSink, RunState | None], ToolCall]:
        """:meth:`bind` for ``node`` in ``state``, with the phase rule looked up once.

        The interpreter keeps one per node and state, so an action call binds only
        ``emit`` and the run (whose sessions MCP tools are called in).
        """
        policy = self._policies.get(node.id, self._unrestricted)
        phase, rule = policy.phase(state.split(PATH_SEPARATOR) if state else ())
        return functools.partial(_Caller, self, node, policy, phase, rule)

    async def _call(
        self,
        caller: _Caller,
        name: str,
        arguments: dict[str, Any],
    ) -> Mapping[str, Any]:
        node, rule, phase = caller.node, caller.rule, caller.phase
        self._known(name, node)
        refused = None if rule is None else _check(name, arguments, phase, rule, self.names)
        if refused is not None:
            caller.emit(PHASE_VIOLATION, {k: v for k, v in refused.items() if k != "error"})
            return refused
        cwd = arguments.pop("cwd", None)
        tool = self._tools.get(name)
        if tool is not None:
            try:
                self._signatures[name].bind(None, **arguments)
            except TypeError as exc:
                raise ActionError(f"tool {name!r}: {exc}", node_id=node.id) from None
        try:
            scope = await asyncio.to_thread(
                scope_of_call, caller.policy.workspace, cwd, CALL_EFFECT_ID.get()
            )
        except ToolRefused as exc:
            return error_result(exc.code, str(exc))
        starting = CALL_STARTING.get()
        if starting is not None:  # every rule passed: the call runs now
            await starting()
        if tool is not None:
            return await tool(scope, **arguments)
        assert self._servers is not None  # _known found it
        run_id, values = _run_values(caller.run)
        return await self._servers.call(run_id, values, name, arguments, scope.effect_id)


class _Caller:
    """``ctx.tool`` of one action call: one small object (an action call makes one)."""

    __slots__ = ("emit", "factory", "node", "phase", "policy", "rule", "run")

    def __init__(
        self,
        factory: ToolFactory,
        node: NodeDef,
        policy: ToolPolicy,
        phase: str,
        rule: PhaseRule | None,
        emit: EventSink,
        run: RunState | None = None,
    ) -> None:
        self.factory = factory
        self.node = node
        self.policy = policy
        self.phase = phase
        self.rule = rule
        self.emit = emit
        self.run = run

    def __call__(self, name: str, /, **arguments: Any) -> Awaitable[Mapping[str, Any]]:
        return self.factory._call(self, name, arguments)


def _run_values(run: RunState | None) -> tuple[str, Mapping[str, Any]]:
    """The run's id and what its templates see (input and data, data winning)."""
    if run is None:  # a caller bound outside a run: one shared session, no values
        return "", EMPTY
    return run.run_id, _RunValues(run)


class _RunValues(Mapping[str, Any]):
    """A run's input and data as templates see them (data wins), looked up, not copied.

    Only a session's first use renders templates from them.
    """

    __slots__ = ("_run",)

    def __init__(self, run: RunState) -> None:
        self._run = run

    def __getitem__(self, key: str) -> Any:
        data = self._run.data
        return data[key] if key in data else self._run.input[key]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._run.input, **self._run.data})

    def __len__(self) -> int:
        return len({**self._run.input, **self._run.data})


@declare_effect(Effect.NONE)
async def advance(scope: Scope) -> Mapping[str, Any]:
    """Finish the current phase and move on to the next one (call it alone, when done)."""
    return {"advance": True}


def scope_of_call(workspace: str | None, cwd: str | None, effect_id: str) -> Scope:
    """The folder a call works in: ``cwd`` under the node's workspace (or the current one)."""
    base = Path(workspace or ".").resolve()
    root = (base / cwd).resolve() if cwd else base
    if workspace is not None and not root.is_relative_to(base):
        raise ToolRefused("outside_workspace", f"cwd {cwd!r} is outside {str(base)!r}")
    if not root.is_dir():
        raise ToolRefused("not_found", f"cwd {str(root)!r} is not a folder")
    return Scope(root, effect_id)


# --------------------------------------------------------------------------- settings

_RULE_KEYS = frozenset({"tools", "deny_commands", "allow_commands"})


def _states(definition: GraphDef, machine: str) -> set[str]:
    """Every state name of ``machine`` and of the machines nested in it."""
    return {s for m in nested_machines(machine, definition.machines) for s in m.states}


def _names(value: Any, what: str, problems: list[str]) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{what} must be a list of names")
        return None
    return frozenset(value)


def _rule(phase: str, spec: Any, known: Sequence[str], problems: list[str]) -> PhaseRule:
    where = f"phases.{phase}"
    if not isinstance(spec, Mapping):
        problems.append(f"{where} must be a mapping with `tools` (and optional command filters)")
        return _DENY_ALL
    problems += [
        f"{where}: unknown key {k!r} (keys: {', '.join(sorted(_RULE_KEYS))})"
        + did_you_mean(str(k), _RULE_KEYS)
        for k in sorted(set(spec) - _RULE_KEYS)
    ]
    tools = spec.get("tools")
    chosen: frozenset[str] | None
    if tools == ALL_TOOLS:
        chosen = None
    elif not isinstance(tools, list) or not tools:
        # An empty whitelist would make the phase useless: refuse it before the run starts.
        problems.append(f'{where}.tools must be "*" or a non-empty list of tool names')
        chosen = frozenset()
    else:
        chosen = _names(tools, f"{where}.tools", problems) or frozenset()
        problems += [
            f"{where}.tools: unknown tool {t!r} (known: {', '.join(known)})"
            + did_you_mean(t, known)
            for t in sorted(chosen - set(known))
        ]
    return PhaseRule(
        tools=chosen,
        deny_commands=_names(spec.get("deny_commands"), f"{where}.deny_commands", problems)
        or frozenset(),
        allow_commands=_names(spec.get("allow_commands"), f"{where}.allow_commands", problems),
    )


def parse_policy(
    node: NodeDef, definition: GraphDef, known: Sequence[str]
) -> tuple[ToolPolicy | None, list[Problem]]:
    """Read a node's ``with.phases`` and ``with.workspace``; None when it has neither."""
    settings = node.settings
    if "phases" not in settings and "workspace" not in settings:
        return None, []
    problems: list[str] = []
    workspace = settings.get("workspace")
    if workspace is not None and not isinstance(workspace, str):
        problems.append("workspace must be a folder path")
        workspace = None
    phases = settings.get("phases") or {}
    if isinstance(phases, str) and phases in PRESETS:
        phases = PRESETS[phases]
    elif not isinstance(phases, Mapping):
        known = ", ".join(sorted(PRESETS))
        problems.append(f"phases must map phase (state) names to rules, or name a preset ({known})")
        phases = {}
    states = _states(definition, node.machine)
    problems += [
        f"phases.{name}: machine {node.machine!r} has no state {name!r}"
        + did_you_mean(str(name), states)
        for name in phases
        if name != ALL_TOOLS and name not in states
    ]
    rules = {str(name): _rule(str(name), spec, known, problems) for name, spec in phases.items()}
    policy = ToolPolicy(phases=MappingProxyType(rules), workspace=workspace)
    where = f"node {node.id!r}: with."
    return policy, [Problem(where + text, node.location) for text in problems]


def _mcp_servers(
    definition: GraphDef, taken: Sequence[str]
) -> tuple[McpServers | None, list[Problem]]:
    """The graph's MCP servers (None without ``mcp:``), and what is wrong with them."""
    if not definition.mcp:
        return None, []
    # Here, not at the top: the settings are read with the schema's model (pydantic),
    # which a graph without servers never needs.
    from phasegraph.tools._mcp import read_servers

    servers, problems = read_servers(definition, taken)
    try:  # the SDK is an extra: imported only for a graph that names servers
        from phasegraph.tools._mcp._servers import McpServers
    except ImportError as exc:
        text = f"mcp: needs the MCP SDK ({exc.name} is missing): {install_hint('mcp')}"
        return None, [*problems, Problem(text, definition.location)]
    return McpServers(servers), problems


def build_tools(definition: GraphDef, tools: Mapping[str, Tool] | None = None) -> ToolFactory:
    """The tool factory for a graph: built-in tools (plus ``tools``), MCP tools, every rule.

    No MCP server is started here: a server's tools are the ones the graph names.

    Raises:
        SpecError: A node's tool rules or the graph's MCP servers are malformed, or the
            MCP SDK is missing (every problem at once).
    """
    available = {**BUILTIN_TOOLS, **(tools or {})}
    servers, problems = _mcp_servers(definition, [*available, ADVANCE_TOOL])
    served = [tool for settings in definition.mcp.values() for tool in settings.get("tools", ())]
    known = sorted({*available, ADVANCE_TOOL, *served})
    policies: dict[str, ToolPolicy] = {}
    for node in definition.nodes:
        policy, found = parse_policy(node, definition, known)
        problems += found
        problems += _offered_problems(node, known)
        if policy is not None:
            policies[node.id] = policy
    if problems:
        raise SpecError(problems)
    return ToolFactory(available, policies, servers)


def _offered_problems(node: NodeDef, known: Sequence[str]) -> list[Problem]:
    """An ``llm:`` binding offering a tool no one provides: its first model turn would fail."""
    problems = []
    for hook, action in node.bind.items():
        if action.kind != "llm":
            continue
        for name in (action.config.get("llm") or {}).get("tools") or ():
            if name not in known:
                problems.append(
                    Problem(
                        f"node {node.id!r}: the llm action bound to hook {hook!r} offers "
                        f"unknown tool {name!r}: no built-in tool, tool given in code or MCP "
                        f"server's `tools:` has that name (known: {', '.join(known)})"
                        + did_you_mean(str(name), known),
                        action.location,
                    )
                )
    return problems
