"""Prepare a graph for running: compile, resolve every name once, and build the first state.

Everything a step needs that does not change during a run (the DAG, the compiled
machines, each bound action wrapped in the middleware chain) is built here, before the
first step, so bad names fail fast and the per-step path does no lookups by string.
"""

from __future__ import annotations

import dataclasses
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
from phasegraph.core._plans import plan_templates, template_label, with_plan_writes
from phasegraph.core._writes import declared_conflicts
from phasegraph.errors import Problem, RunStateError, SpecError
from phasegraph.model import (
    ActionDef,
    Effect,
    GraphDef,
    NodeDef,
    NodeState,
    NodeStatus,
    Plan,
    RunState,
    RunStatus,
    frozen_map,
    nested_machines,
    replace,
)
from phasegraph.run._children import ChildGraph, child_graph
from phasegraph.run._middleware import Middleware, build_middleware, chain
from phasegraph.run._plans import PlanBinding, child_defs, plan_binding

if TYPE_CHECKING:
    from phasegraph.tools._mcp._servers import McpServers
    from phasegraph.tools._registry import ToolFactory

__all__ = [
    "REDUCERS",
    "DeferredTools",
    "PreparedGraph",
    "initial_state",
    "prepare",
    "with_plans",
]

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
        plans: ``(node id, hook)`` → the ``plan:`` binding there.
        templates: ``(declared owner, hook)`` → a plan's template, prepared once (the
            owner is a node's id, or ``OWNER.*`` for a template's own plans).
        results: Child of a plan → the data key it hands its result to its parent in.
        base: The graph before any plan made children (``None``: this is it).
        children: ``(node id, hook)`` → the ``graph:`` binding there (a child run).
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
    plans: Mapping[tuple[str, str], PlanBinding] = field(default_factory=dict)
    templates: Mapping[tuple[str, str], PreparedTemplate] = field(default_factory=dict)
    results: Mapping[str, str] = field(default_factory=dict)
    base: PreparedGraph | None = None
    children: Mapping[tuple[str, str], ChildGraph] = field(default_factory=dict)

    def plan_at(self, node_id: str, path: tuple[str, ...]) -> PlanBinding | None:
        """The ``plan:`` binding of the node's state at ``path``, if it has one."""
        if not self.plans:
            return None
        machine = self.workflow.nodes[node_id].machine
        hook = self.machines.hook(machine, path)
        return None if hook is None else self.plans.get((node_id, hook))

    def awaits(self, node_id: str, node: NodeState) -> bool:
        """Whether the node waits for its plan's children (it expanded, and is waiting)."""
        return node.status is NodeStatus.WAITING and self.plan_at(node_id, node.path) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTemplate:
    """A plan's template with its bindings built once, shared by every child it makes.

    Attributes:
        node: The template (``writes`` widened by what its actions declare).
        actions: Hook → the bound action, wrapped in the middleware chain.
        effects: Hook → what the bound action declares about its side effects.
        gates: Hook → the ``human:`` binding (built per child: a child's settings may
            set its deadline).
        plans: Hook → a ``plan:`` binding of the template's own.
        children: Hook → a ``graph:`` binding (a child run).
    """

    node: NodeDef
    actions: Mapping[str, Action]
    effects: Mapping[str, EffectPolicy]
    gates: Mapping[str, ActionDef]
    plans: Mapping[str, PlanBinding]
    children: Mapping[str, ChildGraph] = field(default_factory=dict)


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
    """The graph's tool factory: built now where it may refuse something, else on demand.

    The templates of the graph's plans are judged with its nodes: their children's
    rules are read from them (and from the items) when a plan makes the children.
    """
    nodes = [*definition.nodes, *(t for t, _ in plan_templates(definition.nodes))]
    if not definition.mcp and not any(
        "phases" in node.settings or "workspace" in node.settings for node in nodes
    ):
        return DeferredTools(definition)
    from phasegraph.tools._registry import build_tools  # see DeferredTools

    return build_tools(replace(definition, nodes=tuple(nodes)))


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
    try:
        middleware = (*middleware, *build_middleware(definition.middleware))
    except SpecError as exc:
        problems += exc.problems
        middleware = ()
    binder = _Binder(definition, middleware, actions or {})
    for node in definition.nodes:
        binder.node(node)
    problems += binder.problems
    workflow = compile_graph(_with_action_writes(definition, binder.built))
    problems[:0] = _check_writes(workflow.definition, workflow)
    if problems:
        raise SpecError(problems)
    return PreparedGraph(
        definition=definition,
        source=source,
        workflow=workflow,
        machines=compile_machines(definition.machines),
        actions=MappingProxyType(binder.bound()),
        tools=_tools(definition),
        gates=MappingProxyType(binder.gates),
        effects=MappingProxyType(binder.effects),
        plans=MappingProxyType(binder.plans),
        templates=MappingProxyType(binder.templates),
        children=MappingProxyType(binder.children),
    )


class _Binder:
    """Builds the bindings of a graph's nodes and of their plans' templates, once each."""

    def __init__(
        self,
        definition: GraphDef,
        middleware: Sequence[Middleware],
        given: Mapping[tuple[str, str], Action],
    ) -> None:
        self.definition = definition
        self.middleware = middleware
        self.base_dir = Path(definition.location.path).parent if definition.location else None
        self.built: dict[tuple[str, str], Action] = dict(given)
        self.gates: dict[tuple[str, str], HumanGate] = {}
        self.effects = {
            key: EffectPolicy(effect=effect_of(action, Effect.IDEMPOTENT))
            for key, action in given.items()
        }
        self.plans: dict[tuple[str, str], PlanBinding] = {}
        self.templates: dict[tuple[str, str], PreparedTemplate] = {}
        self.children: dict[tuple[str, str], ChildGraph] = {}
        self.problems: list[Problem] = []
        # Equal policies are shared: most bindings have the default one, and a graph of
        # 20,000 nodes would otherwise keep 20,000 copies for every collection to walk.
        self._policies: dict[EffectPolicy, EffectPolicy] = {}

    def node(self, node: NodeDef) -> None:
        """Build the bindings of ``node`` (under its own id)."""
        for hook, action_def in node.bind.items():
            if (node.id, hook) in self.built:
                continue
            try:
                self._bind(node, node.id, hook, action_def)
            except SpecError as exc:
                self.problems += exc.problems

    def bound(self) -> dict[tuple[str, str], Action]:
        """Every built action wrapped in the middleware chain."""
        return {key: chain(self.middleware, action) for key, action in self.built.items()}

    def _bind(self, node: NodeDef, owner: str, hook: str, action_def: ActionDef) -> None:
        key = (owner, hook)
        if action_def.kind == "human":
            self.gates[key] = build_gate(
                action_def,
                settings=node.settings,
                accepts_timeout=_accepts_timeout(self.definition, node.machine, hook),
            )
        elif action_def.kind == "plan":
            prepared = self._template(owner, plan_binding(hook, action_def))
            self.templates[key] = prepared
            # The binding makes children from the template as prepared (writes widened).
            self.plans[key] = dataclasses.replace(
                plan_binding(hook, action_def), template=prepared.node
            )
        elif action_def.kind == "graph":
            self.children[key] = child_graph(action_def, self.base_dir)
        else:
            action = self.built[key] = build_action(action_def, self.base_dir)
            policy = effect_policy(action_def, self.base_dir, action)
            self.effects[key] = self._policies.setdefault(policy, policy)

    def _template(self, owner: str, binding: PlanBinding) -> PreparedTemplate:
        """Build a plan's template once, under its label (``OWNER.*``)."""
        template = binding.template
        label = template_label(owner)
        for hook, action_def in template.bind.items():
            if action_def.kind != "human" and (label, hook) not in self.built:
                try:
                    self._bind(template, label, hook, action_def)
                except SpecError as exc:
                    self.problems += exc.problems
        own = {hook: a for (o, hook), a in self.built.items() if o == label}
        alone = replace(self.definition, nodes=(template,))
        widened = _with_action_writes(alone, {(label, h): a for h, a in own.items()}).nodes[0]
        return PreparedTemplate(
            node=with_plan_writes(widened),
            actions=MappingProxyType({h: chain(self.middleware, a) for h, a in own.items()}),
            effects=MappingProxyType(
                {hook: e for (o, hook), e in self.effects.items() if o == label}
            ),
            gates=MappingProxyType({h: a for h, a in template.bind.items() if a.kind == "human"}),
            plans=MappingProxyType({h: p for (o, h), p in self.plans.items() if o == label}),
            children=MappingProxyType({h: c for (o, h), c in self.children.items() if o == label}),
        )


def with_plans(prepared: PreparedGraph, plans: Mapping[str, Plan]) -> PreparedGraph:
    """``prepared`` with the children of ``plans`` among its nodes.

    Every child is made from its plan's template, whose bindings were built once when
    the graph was prepared: a child costs its node definition and a few map entries.
    Plans are applied parents first (a child's id extends its parent's).

    Args:
        prepared: The graph as prepared (a graph with children already is taken back to
            its base first).
        plans: Node id → its plan (a run's :attr:`~phasegraph.model.RunState.plans`).

    Raises:
        RunStateError: A plan names a node, or a ``plan:`` binding, that the graph does
            not have (a graph changed since the run made its plans).
    """
    base = prepared.base or prepared
    if not plans:
        return base
    made = _Children(base)
    for parent in sorted(plans, key=lambda p: (p.count("."), p)):
        made.plan(parent, plans[parent])
    return made.prepared(plans)


class _Children:
    """The bindings and node definitions of a graph's children, gathered plan by plan."""

    def __init__(self, base: PreparedGraph) -> None:
        self.base = base
        self.nodes = {node.id: node for node in base.definition.nodes}
        self.declared = {node_id: node_id for node_id in self.nodes}
        self.actions, self.gates = dict(base.actions), dict(base.gates)
        self.effects, self.plans = dict(base.effects), dict(base.plans)
        self.child_runs = dict(base.children)
        self.results: dict[str, str] = {}

    def plan(self, parent: str, plan: Plan) -> None:
        """Add the children ``parent``'s plan made."""
        base = self.base
        owner = self.declared.get(parent)
        if owner is None or (owner, plan.hook) not in base.templates:
            raise RunStateError(
                f"the run's plan of node {parent!r} cannot be made in graph "
                f"{base.definition.name!r}: it has no node {parent!r} whose hook "
                f"{plan.hook!r} is bound to a plan (the graph changed since the run planned)",
                node_id=parent,
            )
        template = base.templates[(owner, plan.hook)]
        binding = base.plans[(owner, plan.hook)]
        label = template_label(owner)
        for child in child_defs(self.nodes[parent], binding, plan):
            self.nodes[child.id] = child
            self.declared[child.id] = label
            self._bind(child, template)
            if binding.result is not None:
                self.results[child.id] = binding.result

    def _bind(self, child: NodeDef, template: PreparedTemplate) -> None:
        for hook, action in template.actions.items():
            self.actions[(child.id, hook)] = action
        for hook, policy in template.effects.items():
            self.effects[(child.id, hook)] = policy
        for hook, gate in template.gates.items():
            self.gates[(child.id, hook)] = build_gate(
                gate,
                settings=child.settings,
                accepts_timeout=_accepts_timeout(self.base.definition, child.machine, hook),
            )
        for hook, nested in template.plans.items():
            self.plans[(child.id, hook)] = nested
        for hook, run in template.children.items():
            self.child_runs[(child.id, hook)] = run

    def prepared(self, plans: Mapping[str, Plan]) -> PreparedGraph:
        """The prepared graph with every child gathered."""
        base = self.base
        definition = replace(base.definition, nodes=tuple(self.nodes.values()))
        made = [node for node in definition.nodes if node.parent is not None]
        tools = base.tools
        tools = (
            DeferredTools(definition)
            if isinstance(tools, DeferredTools)
            else tools.with_nodes(made, definition)
        )
        return PreparedGraph(
            definition=definition,
            source=base.source,
            workflow=compile_graph(_widened(definition, base), plans),
            machines=base.machines,
            actions=MappingProxyType(self.actions),
            tools=tools,
            gates=MappingProxyType(self.gates),
            effects=MappingProxyType(self.effects),
            plans=MappingProxyType(self.plans),
            templates=base.templates,
            results=MappingProxyType(self.results),
            base=base,
            children=MappingProxyType(self.child_runs),
        )


def _widened(definition: GraphDef, base: PreparedGraph) -> GraphDef:
    """The expanded definition with each base node's writes as the base workflow has them."""
    compiled = base.workflow.nodes
    nodes = tuple(compiled.get(node.id, node) for node in definition.nodes)
    return replace(definition, nodes=nodes)


def initial_state(
    prepared: PreparedGraph,
    run_id: str,
    run_input: Mapping[str, Any],
    now: datetime,
    definition_key: str = "",
) -> RunState:
    """The state of a new run at seq 0: every node pending (pinned to ``definition_key``)."""
    definition = prepared.definition
    return RunState(
        run_id=run_id,
        graph=definition.name,
        graph_source=prepared.source,
        graph_digest=definition.digest,
        definition=definition_key,
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
        widened.append(with_plan_writes(node))
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
