"""Prepare a graph for running: compile, resolve every name once, and build the first state.

Everything a step needs that does not change during a run (the DAG, the compiled
machines, each bound action wrapped in the middleware chain) is built here, before the
first step, so bad names fail fast and the per-step path does no lookups by string.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from phasegraph.actions import Action, EventSink, ToolCall, effect_of
from phasegraph.actions._base import declared_writes, declares_writes
from phasegraph.actions._build import build_action
from phasegraph.actions._effects import EffectPolicy, effect_policy
from phasegraph.actions._human import TIMEOUT_TRIGGER, HumanGate, build_gate
from phasegraph.core._graph import WorkflowGraph, compile_graph
from phasegraph.core._machine import MachineSet, compile_machines
from phasegraph.core._writes import declared_conflicts
from phasegraph.errors import Problem, SpecError
from phasegraph.model import (
    Effect,
    GraphDef,
    NodeDef,
    NodeState,
    RunState,
    RunStatus,
    frozen_map,
    nested_machines,
    replace,
)
from phasegraph.run._middleware import Middleware, build_middleware, chain

if TYPE_CHECKING:
    from phasegraph.tools._mcp._servers import McpServers
    from phasegraph.tools._registry import ToolFactory

__all__ = ["REDUCERS", "DeferredTools", "PreparedGraph", "initial_state", "prepare"]

REDUCERS = frozenset({"append", "merge"})
"""How writes to a key from unordered nodes may be combined."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedGraph:
    """A graph ready to run: compiled once, shared by every step.

    Attributes:
        definition: The graph definition.
        source: Built-in name or file path it was loaded from.
        workflow: The compiled DAG.
        machines: Every machine compiled once.
        actions: ``(node id, hook)`` → the bound action wrapped in the middleware chain.
        tools: Binds ``ctx.tool`` for each action call (a :class:`DeferredTools` when
            nothing about the graph's tools can be wrong: built on the first tool call).
        gates: ``(node id, hook)`` → the human gate bound there.
        effects: ``(node id, hook)`` → what the bound action declares about its side
            effects (see :mod:`phasegraph.actions._effects`).
        sites: A cache the interpreter fills: ``(node id, state path)`` → what an action
            call there needs that never changes (see ``phasegraph.run._interpreter``).
    """

    definition: GraphDef
    source: str
    workflow: WorkflowGraph
    machines: MachineSet
    actions: Mapping[tuple[str, str], Action]
    tools: ToolFactory | DeferredTools
    gates: Mapping[tuple[str, str], HumanGate]
    effects: Mapping[tuple[str, str], EffectPolicy] = field(default_factory=dict)
    sites: dict[tuple[str, tuple[str, ...]], Any] = field(
        default_factory=dict, repr=False, compare=False
    )


class DeferredTools:
    """A graph's tool factory, built the first time an action calls or offers a tool.

    Only for a graph whose tools cannot be wrong (no ``mcp:``, no node with tool rules:
    :func:`~phasegraph.tools._registry.build_tools` has nothing to refuse there), so
    building it later changes nothing but when the tool modules are imported: most
    graphs' actions call no tool, and a run of one never imports them.
    """

    __slots__ = ("_definition", "_factory")

    def __init__(self, definition: GraphDef) -> None:
        self._definition = definition
        self._factory: ToolFactory | None = None

    @property
    def factory(self) -> ToolFactory:
        """The tool factory, built on first use."""
        if self._factory is None:
            from phasegraph.tools._registry import build_tools

            self._factory = build_tools(self._definition)
        return self._factory

    @property
    def servers(self) -> McpServers | None:
        """None: a graph with MCP servers has its factory built at once."""
        return None

    @property
    def has_servers(self) -> bool:
        """False: a graph with MCP servers has its factory built at once."""
        return False

    @property
    def names(self) -> tuple[str, ...]:
        """See :attr:`ToolFactory.names <phasegraph.tools._registry.ToolFactory.names>`."""
        return self.factory.names

    async def offered(
        self, node: NodeDef, state: str, run: RunState | None, wanted: Sequence[str]
    ) -> list[Mapping[str, Any]]:
        """See :meth:`ToolFactory.offered <phasegraph.tools._registry.ToolFactory.offered>`."""
        return await self.factory.offered(node, state, run, wanted)

    def effect(self, name: str) -> Effect:
        """See :meth:`ToolFactory.effect <phasegraph.tools._registry.ToolFactory.effect>`."""
        return self.factory.effect(name)

    async def close_run(self, run_id: str) -> None:
        """Nothing to close: the graph has no MCP servers."""

    def bind(
        self, node: NodeDef, state: str, emit: EventSink, run: RunState | None = None
    ) -> ToolCall:
        """See :meth:`ToolFactory.bind <phasegraph.tools._registry.ToolFactory.bind>`."""
        return self.factory.bind(node, state, emit, run)

    def binder(self, node: NodeDef, state: str) -> Callable[[EventSink, RunState | None], ToolCall]:
        """See :meth:`ToolFactory.binder <phasegraph.tools._registry.ToolFactory.binder>`.

        The factory is built when the result is first called (an action calls a tool).
        """
        bound: list[Callable[[EventSink, RunState | None], ToolCall]] = []

        def bind(emit: EventSink, run: RunState | None = None) -> ToolCall:
            if not bound:
                bound.append(self.factory.binder(node, state))
            return bound[0](emit, run)

        return bind


def _tools(definition: GraphDef) -> ToolFactory | DeferredTools:
    """The graph's tool factory: built now where it may refuse something, else on demand."""
    if not definition.mcp and not any(
        "phases" in node.settings or "workspace" in node.settings for node in definition.nodes
    ):
        return DeferredTools(definition)
    from phasegraph.tools._registry import build_tools  # see DeferredTools

    return build_tools(definition)


def _check_writes(definition: GraphDef, workflow: WorkflowGraph) -> list[Problem]:
    nodes = {node.id: node for node in definition.nodes}
    return [
        Problem(conflict.message(), nodes[conflict.second].location)
        for conflict in declared_conflicts(definition.nodes, definition.reducers, workflow)
    ]


def prepare(
    definition: GraphDef,
    source: str,
    actions: Mapping[tuple[str, str], Action] | None = None,
    *,
    middleware: Sequence[Middleware] = (),
) -> PreparedGraph:
    """Compile ``definition`` and build every bound action once.

    Args:
        definition: The graph.
        source: Built-in name or file path, recorded in runs so they can be resumed.
        actions: Callables to bind in code, by ``(node id, hook)``; they take precedence
            over the YAML bindings and are wrapped in the same middleware.
        middleware: Layers around every action, outside the graph's own ``middleware:``
            (the engine's tracing).

    Raises:
        SpecError: Anything that cannot be prepared, every problem at once.
    """
    problems = [
        Problem(
            f"unknown reducer {name!r} for key {key!r} (known: append, merge)", definition.location
        )
        for key, name in definition.reducers.items()
        if name not in REDUCERS
    ]
    base_dir = Path(definition.location.path).parent if definition.location else None
    try:
        middleware = (*middleware, *build_middleware(definition.middleware))
    except SpecError as exc:
        problems += exc.problems
        middleware = ()
    built: dict[tuple[str, str], Action] = dict(actions or {})
    gates: dict[tuple[str, str], HumanGate] = {}
    effects = {
        key: EffectPolicy(effect=effect_of(action, Effect.IDEMPOTENT))
        for key, action in built.items()
    }
    # Equal policies are shared: most bindings have the default one, and a graph of
    # 20,000 nodes would otherwise keep 20,000 copies for every collection to walk.
    policies: dict[EffectPolicy, EffectPolicy] = {}
    for node in definition.nodes:
        for hook, action_def in node.bind.items():
            if (node.id, hook) in built:
                continue
            try:
                if action_def.kind == "human":
                    gates[(node.id, hook)] = build_gate(
                        action_def,
                        settings=node.settings,
                        accepts_timeout=_accepts_timeout(definition, node.machine, hook),
                    )
                else:
                    action = built[(node.id, hook)] = build_action(action_def, base_dir)
                    policy = effect_policy(action_def, base_dir, action)
                    effects[(node.id, hook)] = policies.setdefault(policy, policy)
            except SpecError as exc:
                problems += exc.problems
    workflow = compile_graph(_with_action_writes(definition, built))
    problems[:0] = _check_writes(workflow.definition, workflow)
    if problems:
        raise SpecError(problems)
    bound = {key: chain(middleware, action) for key, action in built.items()}
    return PreparedGraph(
        definition=definition,
        source=source,
        workflow=workflow,
        machines=compile_machines(definition.machines),
        actions=MappingProxyType(bound),
        tools=_tools(definition),
        gates=MappingProxyType(gates),
        effects=MappingProxyType(effects),
    )


def initial_state(
    prepared: PreparedGraph, run_id: str, run_input: Mapping[str, Any], now: datetime
) -> RunState:
    """The state of a new run at seq 0: every node pending."""
    definition = prepared.definition
    return RunState(
        run_id=run_id,
        graph=definition.name,
        graph_source=prepared.source,
        graph_digest=definition.digest,
        seq=0,
        status=RunStatus.RUNNING,
        input=frozen_map(run_input),
        data=frozen_map({}),
        nodes=MappingProxyType({node.id: NodeState() for node in definition.nodes}),
        created_at=now,
        updated_at=now,
    )


def _with_action_writes(
    definition: GraphDef, actions: Mapping[tuple[str, str], Action]
) -> GraphDef:
    """``definition`` with each declared ``writes:`` widened by the keys its actions declare.

    A concern action such as the fallback chain's ``emergency`` writes a key of its own
    (:func:`~phasegraph.actions._base.writes_data`): the node may write it without listing
    it, and the write-conflict rule counts it like a listed key. A node without
    ``writes:`` may write anything already.
    """
    by_node: dict[str, list[Action]] = {}
    for (node_id, _), action in actions.items():  # once: a graph may have 20,000 nodes
        if declares_writes(action):  # the rest declare no keys: no list for their nodes
            by_node.setdefault(node_id, []).append(action)
    widened = []
    for node in definition.nodes:
        keys = [
            key
            for action in by_node.get(node.id, ())
            for key in declared_writes(action, node.settings)
        ]
        if node.writes is not None and set(keys) - set(node.writes):
            node = replace(node, writes=tuple(dict.fromkeys((*node.writes, *keys))))
        widened.append(node)
    if widened == list(definition.nodes):
        return definition
    return replace(definition, nodes=tuple(widened))


def _accepts_timeout(definition: GraphDef, machine: str, hook: str) -> bool:
    """Whether a state bound to ``hook`` (in ``machine`` or one nested) accepts ``timeout``.

    Only there may a default deadline fire.
    """
    for nested in nested_machines(machine, definition.machines):
        for state in nested.states.values():
            if state.hook == hook and any(
                t.trigger == TIMEOUT_TRIGGER and state.name in t.source for t in nested.transitions
            ):
                return True
    return False
