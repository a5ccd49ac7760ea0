"""Frozen value types: definitions, run state, snapshots and step records.

Everything here is plain data: frozen :class:`Value` types (msgspec structs, the one
third-party import, for their construction cost) and enums. Values that cross a step
are frozen; changes are returned as new values (:func:`replace`), never applied in place.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import field
from datetime import datetime
from enum import StrEnum
from math import isqrt
from types import MappingProxyType
from typing import Any, Final, TypeVar, final

import msgspec

from phasegraph._vocabulary import RunStatus
from phasegraph.errors import RunStateError, SourceLocation

__all__ = [
    "ActionDef",
    "Actor",
    "BudgetDef",
    "BusyDef",
    "BusyPolicy",
    "ChunkedMap",
    "Effect",
    "ErrorRecord",
    "GraphDef",
    "Interrupt",
    "LedgerEntry",
    "MachineDef",
    "MiddlewareDef",
    "NodeDef",
    "NodeOutcome",
    "NodeState",
    "NodeStatus",
    "OnUnknown",
    "Plan",
    "PlanItem",
    "Price",
    "RunState",
    "RunStatus",
    "SpendLimit",
    "StateDef",
    "StepRecord",
    "TransitionDef",
    "Value",
    "replace",
]

EMPTY: Mapping[str, Any] = MappingProxyType({})
"""A shared read-only empty mapping."""

MIGRATE = "migrate"
"""The kind of step that moves a run to another stored definition: its ``result`` names
the definition (``definition``, ``graph_digest``, ``graph_source``, ``graph``), what it
moved from (``from``), and nodes a rename dropped (``dropped``)."""

TEMPLATE_MAX_CHARS = 1024 * 1024
"""The longest text a template may render to (a value can be large; the output is capped)."""


_PLACEHOLDER = re.compile(r"([^.\[\]]+)((?:\[[^.\[\]]+\])*)")
"""``name`` then any number of ``[key]`` lookups into mappings; never ``.attr``."""


def template_parts(template: str) -> list[tuple[str, tuple[str, ...] | None]]:
    """Split a ``{name}`` template into (literal text, placeholder path or ``None``) parts.

    A placeholder is a plain name, maybe followed by ``[key]`` lookups into mappings
    (``{reply[id]}``); the path is the name then the keys. ``{{`` and ``}}`` are literal
    braces. Anything more that ``str.format`` reads (``{a.b}``, ``{a!r}``, ``{a:>99}``)
    is refused: it would reach into a value's attributes or make output of any size.

    Raises:
        ValueError: The template is malformed or a placeholder is more than a name and
            keys; the message says which and what to write instead.
    """
    parts: list[tuple[str, tuple[str, ...] | None]] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            parts.append((literal, None))
            continue
        suffix = (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
        shown = "{" + name + suffix + "}"
        if not name or name[0].isdigit():
            raise ValueError(f"{shown} is a positional placeholder: name the value, e.g. {{id}}")
        if conversion or spec:
            raise ValueError(f"{shown} has a conversion or format spec: write plain {{{name}}}")
        matched = _PLACEHOLDER.fullmatch(name)
        if matched is None:
            raise ValueError(
                f"{shown} reaches into a value: write {{name}} or {{name[key]}} (a key of a "
                "mapping); attributes are not filled"
            )
        keys = tuple(key[1:-1] for key in re.findall(r"\[[^\]]*\]", matched.group(2)))
        parts.append((literal, (matched.group(1), *keys)))
    return parts


PATH_SEPARATOR = "/"
"""Joins nested state names into one path string; state names may not contain it."""

CHILD_SEPARATOR = "."
"""Joins a node id and a plan item's id into the child node's id (``phases.build``).

Node ids declared in a graph may not contain it, so a child's id never meets one."""


def child_id(parent: str, item: str) -> str:
    """The id of the child node that item ``item`` of ``parent``'s plan becomes."""
    return f"{parent}{CHILD_SEPARATOR}{item}"


def _no_entries() -> Mapping[str, Any]:
    return EMPTY


def empty_field() -> Any:
    """A dataclass default of the shared empty mapping (mappingproxy is not hashable)."""
    return field(default_factory=_no_entries)


def frozen_map(values: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """Return a read-only copy of ``values`` (the shared empty map when empty)."""
    if not values:
        return EMPTY
    return MappingProxyType(dict(values))


V = TypeVar("V")
_T = TypeVar("_T", bound="Value")


class Value(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The base of phasegraph's frozen values: a frozen, keyword-only ``msgspec.Struct``.

    Several are built per step (a context, a result, node states, a record, the next run
    state, a commit), and a history read builds one record per step: a ``Struct`` is built
    in C, several times faster than a frozen dataclass, whose ``__init__`` sets each field
    through ``object.__setattr__``. Subclasses repeat ``frozen=True, kw_only=True`` so that
    type checkers see them (the options are inherited at run time, not by the checkers).
    Change a value with :func:`replace`.

    Values are not tracked by the garbage collector (``gc=False``): they hold plain data
    built before them, so they can never close a reference cycle, and a process with
    thousands of runs in flight keeps far fewer objects for each collection to walk.
    Values that hold what a user hands in — an action's context and result — are
    tracked again (``gc=True``): those may hold anything.
    """


def replace(value: _T, /, **changes: Any) -> _T:
    """A copy of ``value`` with the fields named in ``changes`` set to new values.

    What :func:`dataclasses.replace` is to a dataclass, for a :class:`Value` (an action
    result, a context, a run state, ...): ``replace(result, trigger="retry")``.

    Raises:
        TypeError: A name in ``changes`` is not a field of ``value``.
    """
    return msgspec.structs.replace(value, **changes)


@final
class ChunkedMap(Mapping[str, V]):
    """A read-only map that a step updates by a few keys without copying the rest.

    The keys, in sorted order, are cut into about √n chunks; an update copies only the
    chunks it touches and shares every other one with the map it came from, so a run of
    n nodes pays O(√n) per step rather than O(n). Chunks hold runs of sorted keys, so a
    codec can encode the map chunk by chunk, in canonical order, and keep the bytes of
    chunks no step touched (:attr:`chunks` exposes them; each is never changed).
    """

    __slots__ = ("_chunks", "_where")

    def __init__(self, chunks: tuple[Mapping[str, V], ...], where: Mapping[str, int]) -> None:
        self._chunks = chunks
        self._where = where

    @classmethod
    def of(cls, items: Mapping[str, V]) -> ChunkedMap[V]:
        """A chunked copy of ``items``."""
        keys = sorted(items)
        size = _chunk_size(len(keys))
        chunks = tuple(
            MappingProxyType({key: items[key] for key in keys[start : start + size]})
            for start in range(0, len(keys), size)
        )
        return cls(chunks, _where(keys))

    @property
    def chunks(self) -> tuple[Mapping[str, V], ...]:
        """The chunks, in key order; a chunk no update touched is the same object."""
        return self._chunks

    def updated(self, changes: Mapping[str, V]) -> ChunkedMap[V]:
        """This map with ``changes`` applied (a new key rebuilds the chunks)."""
        where = self._where
        if len(changes) == 1:  # the usual step: one node moved
            for key, value in changes.items():
                index = where.get(key)
                if index is None:
                    break
                chunks = list(self._chunks)
                chunk = dict(chunks[index])
                chunk[key] = value
                chunks[index] = MappingProxyType(chunk)
                return ChunkedMap(tuple(chunks), where)
        touched: dict[int, dict[str, V]] = {}
        for key, value in changes.items():
            index = where.get(key)
            if index is None:
                return ChunkedMap.of({**self, **changes})
            touched.setdefault(index, {})[key] = value
        chunks = list(self._chunks)
        for index, values in touched.items():
            chunks[index] = MappingProxyType({**chunks[index], **values})
        return ChunkedMap(tuple(chunks), where)

    def __getitem__(self, key: str) -> V:
        return self._chunks[self._where[key]][key]

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return len(self._where)

    def __repr__(self) -> str:
        return f"ChunkedMap({dict(self)!r})"


_WHERE: dict[tuple[str, ...], Mapping[str, int]] = {}
"""Chunk index maps by sorted keys: every run of a graph has the same node ids."""
_WHERE_KEYS: Final = 1024  # larger maps are not shared (nor kept)
_WHERE_KEPT: Final = 64


def _chunk_size(count: int) -> int:
    """How many keys a chunk of a map of ``count`` keys holds."""
    return max(16, isqrt(count))


def _where(keys: list[str]) -> Mapping[str, int]:
    """Key → chunk index for ``keys`` (sorted) cut into chunks; read-only."""
    size = _chunk_size(len(keys))
    if len(keys) > _WHERE_KEYS:
        return MappingProxyType({key: index // size for index, key in enumerate(keys)})
    kept = tuple(keys)
    where = _WHERE.get(kept)
    if where is None:
        if len(_WHERE) >= _WHERE_KEPT:
            _WHERE.clear()  # a bound, not a cache policy
        where = MappingProxyType({key: index // size for index, key in enumerate(keys)})
        _WHERE[kept] = where
    return where


def updated_map(values: Mapping[str, V], changes: Mapping[str, V]) -> Mapping[str, V]:
    """``values`` with ``changes`` applied, sharing what did not change (a :class:`ChunkedMap`)."""
    if not changes:
        return values
    if isinstance(values, ChunkedMap):
        return values.updated(changes)
    return ChunkedMap.of({**values, **changes})


class NodeStatus(StrEnum):
    """A node's lifecycle.

    pending → running → waiting → running; running → completed | failed | cancelled;
    pending → skipped | cancelled; waiting → cancelled.
    """

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the node has finished for good."""
        return self in _TERMINAL_NODE

    def ensure_can_become(self, new: NodeStatus, *, node_id: str | None = None) -> None:
        """Raise :class:`RunStateError` unless ``self → new`` is a legal change."""
        if new is not self and new not in _NODE_MOVES[self]:
            raise RunStateError(f"node cannot go from {self} to {new}", node_id=node_id)


_TERMINAL_NODE = frozenset(
    {NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED}
)
_NODE_MOVES: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    NodeStatus.PENDING: frozenset(
        {NodeStatus.RUNNING, NodeStatus.SKIPPED, NodeStatus.CANCELLED, NodeStatus.FAILED}
    ),
    NodeStatus.RUNNING: frozenset(
        {NodeStatus.WAITING, NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.CANCELLED}
    ),
    NodeStatus.WAITING: frozenset(
        {NodeStatus.RUNNING, NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.CANCELLED}
    ),
    NodeStatus.COMPLETED: frozenset(),
    NodeStatus.FAILED: frozenset(),
    NodeStatus.SKIPPED: frozenset(),
    NodeStatus.CANCELLED: frozenset(),
}


class NodeOutcome(StrEnum):
    """What a node's final state means to the rest of the graph.

    Only ``success`` lets dependents run; every other outcome counts as a failure.
    """

    SUCCESS = "success"
    FAILED = "failed"
    PARKED = "parked"
    GAVE_UP = "gave_up"
    CANCELLED = "cancelled"


class Effect(StrEnum):
    """What running a tool call or an action again does to the world.

    ``none`` only reads; ``idempotent`` gives the same outcome for the same effect id
    (``write_file``); ``once`` must not happen twice (``run_command``, an ``http:`` POST).
    Before a ``once`` effect runs, its intent is committed, so a crash between the intent
    and its result leaves an **outcome unknown** that the binding's :class:`OnUnknown`
    policy resolves.
    """

    NONE = "none"
    IDEMPOTENT = "idempotent"
    ONCE = "once"


class OnUnknown(StrEnum):
    """What resuming does with a ``once`` effect whose intent has no committed result.

    ``ask`` parks the run on a gate naming the call; ``retry`` runs it again with the same
    effect id; ``fail`` fails the step as an action error (the state's ``error`` trigger if
    it takes one); ``reconcile`` asks the binding's reconciler (a ``python:`` function that
    looks the effect up).
    """

    ASK = "ask"
    RETRY = "retry"
    FAIL = "fail"
    RECONCILE = "reconcile"


# --------------------------------------------------------------------------- definitions


class StateDef(Value, frozen=True, kw_only=True):
    """One state of a machine.

    Attributes:
        name: The state name (unique within its machine).
        final: The node outcome this state stands for, when it is final.
        hook: The slot a graph binds to an action that runs in this state.
        machine: Name of a machine nested in this state; its outcome is the trigger
            this state then receives.
        retries: The state whose call this state's action makes again (a recovery's
            retry): the action keeps that call's effect ids, so a receiver that
            deduplicates on them sees one call, not one per attempt.
        description: Free text for diagrams and docs.
        location: Where the state is declared.
    """

    name: str
    final: NodeOutcome | None = None
    hook: str | None = None
    machine: str | None = None
    retries: str | None = None
    description: str = ""
    location: SourceLocation | None = None


class TransitionDef(Value, frozen=True, kw_only=True):
    """One declared transition.

    Attributes:
        trigger: The trigger name.
        source: The states it leaves from.
        dest: The state it enters.
        conditions: Predicate names that must all hold.
        unless: Predicate names that must all fail.
        location: Where the transition is declared.
    """

    trigger: str
    source: tuple[str, ...]
    dest: str
    conditions: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    location: SourceLocation | None = None


class BudgetDef(Value, frozen=True, kw_only=True):
    """A named counter with a limit, spent by entering certain states.

    Attributes:
        name: The budget name.
        limit: Default limit (a node's ``with.budgets`` may override it).
        spend_on: States whose every entry spends one unit.
    """

    name: str
    limit: int
    spend_on: tuple[str, ...]


MICROS: Final = 1_000_000
"""Money is counted in millionths of the price table's currency (integers add exactly)."""


class Price(Value, frozen=True, kw_only=True):
    """What a model's tokens cost, per million, in the price table's currency.

    Attributes:
        input: The price of a million prompt tokens.
        output: The price of a million completion tokens.
    """

    input: float
    output: float

    def micros(self, prompt: int, completion: int) -> int:
        """The cost of ``prompt`` and ``completion`` tokens, in millionths, rounded up."""
        return math.ceil(prompt * self.input + completion * self.output)


class SpendLimit(Value, frozen=True, kw_only=True):
    """A run's budget for model calls, shared by every node (a graph's ``budget:``).

    Attributes:
        tokens: The most tokens the run's model calls may spend (``None``: no limit).
        money: The most money they may cost, in the price table's currency.
        prices: Model name → its price; a money limit bounds only priced models.
        required: ``check`` proves every model call sits under a finite limit.
    """

    tokens: int | None = None
    money: float | None = None
    prices: Mapping[str, Price] = EMPTY
    required: bool = False

    @property
    def money_micros(self) -> int | None:
        """The money limit in millionths (``None``: no limit)."""
        return None if self.money is None else round(self.money * MICROS)

    @property
    def finite(self) -> bool:
        """Whether anything is limited."""
        return self.tokens is not None or self.money is not None


class MachineDef(Value, frozen=True, kw_only=True):
    """A declared state machine, validated but not yet compiled.

    Attributes:
        name: The machine name graphs refer to.
        initial: The initial state.
        states: States by name, in declaration order.
        transitions: Declared transitions, in declaration order.
        budgets: Budgets by name.
        description: Free text.
        location: The file the machine came from.
    """

    name: str
    initial: str
    states: Mapping[str, StateDef]
    transitions: tuple[TransitionDef, ...]
    budgets: Mapping[str, BudgetDef] = EMPTY
    description: str = ""
    location: SourceLocation | None = None


class ActionDef(Value, frozen=True, kw_only=True):
    """What a bound hook runs, as declared (turned into a callable by ``actions``).

    Attributes:
        kind: ``python``, ``shell``, ``http`` or ``human``.
        config: Kind-specific settings, already validated by the schema.
        triggers: Triggers the action declares it may return.
        location: Where the binding is declared.
    """

    kind: str
    config: Mapping[str, Any]
    triggers: tuple[str, ...] = ()
    location: SourceLocation | None = None
    template: NodeDef | None = None
    """For a ``plan:`` binding, the node each item of the plan becomes (its ``id`` is
    ``*``; its ``needs`` are the binding node's own)."""


class MiddlewareDef(Value, frozen=True, kw_only=True):
    """A middleware the graph enables, with its settings."""

    name: str
    config: Mapping[str, Any] = EMPTY
    location: SourceLocation | None = None


class NodeDef(Value, frozen=True, kw_only=True):
    """One node of a workflow graph.

    Attributes:
        id: The node id (unique in the graph).
        machine: Name of the machine the node runs.
        needs: Ids of nodes that must succeed first.
        bind: Hook name → the action it runs.
        settings: The node's ``with`` block (budgets, whitelists, timeouts, ...).
        writes: Top-level data keys the node declares it writes, if declared.
        location: Where the node is declared.
        parent: For a child of a plan, the node whose plan made it.
        item: For a child of a plan, its item as the plan gave it (``{item}`` in
            templates, ``ctx.item`` in actions).
    """

    id: str
    machine: str
    needs: tuple[str, ...] = ()
    bind: Mapping[str, ActionDef] = EMPTY
    settings: Mapping[str, Any] = EMPTY
    writes: tuple[str, ...] | None = None
    location: SourceLocation | None = None
    parent: str | None = None
    item: Any = None


def nested_machines(root: str, machines: Mapping[str, MachineDef]) -> tuple[MachineDef, ...]:
    """Machine ``root`` and every machine nested in it, each once, outermost first.

    Names missing from ``machines`` are passed over (the loader reports them).
    """
    found: dict[str, MachineDef] = {}
    pending = [root]
    while pending:
        name = pending.pop(0)
        machine = machines.get(name)
        if machine is None or name in found:
            continue
        found[name] = machine
        pending += [state.machine for state in machine.states.values() if state.machine]
    return tuple(found.values())


class BusyPolicy(StrEnum):
    """What a message sent to a run does when the run cannot take it now (it is busy).

    ``reject`` refuses it, naming the step the run is on; ``enqueue`` keeps it in the
    run's inbox until a gate takes it; ``interrupt`` cuts the action in flight short (as a
    cancel does) and hands the message to the busy node; ``rollback`` discards the turn
    in flight (back to the gate that took the last message, as if it never began) and
    hands the message to that gate.
    """

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


class BusyDef(Value, frozen=True, kw_only=True):
    """A graph's ``busy:``: that its runs take messages, and what one does while busy.

    Attributes:
        policy: What a message does while the run is busy (a gate may override it).
        trigger: The trigger a message fires on the node that takes it: on a gate that
            accepts it, or (``interrupt``) on a busy node whose state accepts it.
    """

    policy: BusyPolicy
    trigger: str = "message"


class GraphDef(Value, frozen=True, kw_only=True):
    """A workflow graph with every machine it uses resolved.

    Attributes:
        name: The graph name.
        nodes: Nodes in declaration order.
        machines: Every machine the graph uses (nested ones included), by name.
        concurrency: How many nodes may run at once.
        input_schema: JSON Schema the run input must satisfy, if any.
        reducers: Data key → how concurrent writes combine (``append``, ``merge``).
        middleware: Middleware to wrap every action call, outermost first.
        description: Free text.
        output: Data keys that are the run's result (shown when the run ends).
        mcp: MCP server name → its settings as written (``phasegraph.tools`` reads them).
        busy: Whether runs take messages, and what one does while the run is busy
            (``None``: runs take no messages).
        location: The file the graph came from.
        digest: Content hash of the definition, recorded in every run.
        budget: The run's budget for model calls (see :class:`SpendLimit`), if any.
    """

    name: str
    nodes: tuple[NodeDef, ...]
    machines: Mapping[str, MachineDef]
    concurrency: int = 3
    input_schema: Mapping[str, Any] | None = None
    reducers: Mapping[str, str] = EMPTY
    middleware: tuple[MiddlewareDef, ...] = ()
    description: str = ""
    output: tuple[str, ...] = ()
    mcp: Mapping[str, Mapping[str, Any]] = EMPTY
    busy: BusyDef | None = None
    location: SourceLocation | None = None
    digest: str = ""
    budget: SpendLimit | None = None


# --------------------------------------------------------------------------- run state


class LedgerEntry(Value, frozen=True, kw_only=True):
    """One effect of a node's step in flight: a tool call, or the action itself.

    Committed as the step runs (an intent before a ``once`` effect, the result as each
    call completes) and dropped when the step itself commits, so a resumed step runs only
    what has no committed result.

    Attributes:
        id: The effect id: ``run:node:step`` for the action, ``run:node:step:index`` for
            a tool call; the same for every attempt at the step.
        index: The call's position in the model's message (-1: the action itself).
        tool: The tool called ("" for the action).
        arguments: The call's arguments as the model gave them.
        effect: The effect kind the tool or action declares.
        on_unknown: What a resume does if this intent has no result.
        result: The call's result, or ``None`` while only the intent is committed.
    """

    id: str
    index: int = -1
    tool: str = ""
    arguments: Mapping[str, Any] = EMPTY
    effect: Effect = Effect.ONCE
    on_unknown: OnUnknown = OnUnknown.ASK
    result: Mapping[str, Any] | None = None


class NodeState(Value, frozen=True, kw_only=True):
    """Where one node is.

    Attributes:
        status: Lifecycle status.
        path: Current state, outermost machine first (empty before the node starts).
        outcome: Set once the node reached a final state.
        counters: Budget name → units spent (nested levels prefixed ``state/``).
        steps: Transitions taken so far.
        error: Why the node failed, when it did.
        payload: The payload of the trigger that entered the current state (what the
            next action sees as ``ctx.payload``, e.g. a reviewer's feedback).
        ledger: The effects of the step in flight committed so far (see
            :class:`LedgerEntry`); empty between steps.
        result: For a child of a plan that declares a ``result:`` key, what the child
            wrote to it: its parent gathers its children's results, in plan order.
        retried: The step of the node's last call in a state another state ``retries``:
            a retry's action uses that call's effect ids (``None``: no such call yet).
    """

    status: NodeStatus = NodeStatus.PENDING
    path: tuple[str, ...] = ()
    outcome: NodeOutcome | None = None
    counters: Mapping[str, int] = EMPTY
    steps: int = 0
    error: str | None = None
    payload: Mapping[str, Any] = EMPTY
    ledger: tuple[LedgerEntry, ...] = ()
    result: Any = None
    retried: int | None = None

    @property
    def state(self) -> str:
        """The current state path as one string (``parent/child``)."""
        return PATH_SEPARATOR.join(self.path)


class Actor(Value, frozen=True, kw_only=True):
    """Who decided something about a run: started, answered, cancelled or forked it.

    Recorded on the step the decision committed (:attr:`StepRecord.actor`), under the
    same checksum as the rest of the step.

    Attributes:
        name: The principal's name (``local:alice`` for a command run on the machine
            that holds the store; a server names its own principals).
        groups: The groups the principal belongs to: a gate's ``group:NAME`` reviewer
            admits every member of ``NAME``.
    """

    name: str
    groups: tuple[str, ...] = ()


class Interrupt(Value, frozen=True, kw_only=True):
    """A question the run is waiting on (a human gate).

    Attributes:
        id: Stable id replies must quote.
        node: The node that asked.
        kind: What is asked (``review``, ``approval``, ...).
        payload: What the answerer needs to see.
        deadline: When the timeout trigger fires, if ever.
        created_at: When it was asked.
        parked: Whether the run counts as parked (not just waiting) while this is open.
        reviewers: Who may answer: principal names and ``group:NAME`` entries (empty:
            anyone who may reply to the run).
        seq: The step that opened this gate: a reply may quote it, so that an answer
            meant for an earlier opening of the same gate is refused (0: opened before
            format 4 recorded it).
    """

    id: str
    node: str
    kind: str
    payload: Mapping[str, Any] = EMPTY
    deadline: datetime | None = None
    created_at: datetime | None = None
    parked: bool = False
    reviewers: tuple[str, ...] = ()
    seq: int = 0


class PlanItem(Value, frozen=True, kw_only=True):
    """One item of a node's plan: a child node, made from the item and its template.

    Attributes:
        id: The item's id among its siblings; the child node's id is
            ``PARENT.ID`` (:func:`child_id`).
        needs: The ids of the siblings it needs.
        value: The item as the plan gave it (what the child's templates read as
            ``{item}``; a mapping's other fields are its settings).
        version: The plan version that made this child.
    """

    id: str
    needs: tuple[str, ...] = ()
    value: Any = None
    version: int = 1


class Plan(Value, frozen=True, kw_only=True):
    """The plan a node turned into children: every child it made, and which count now.

    Committed as one step (``kind: expand``) before any child runs; a revision (a
    replan) is a new version, committed the same way: children that finished are kept,
    children that had not started are replaced or dropped.

    Attributes:
        hook: The ``plan:`` binding that made it (its template makes the children).
        version: 1 for the first plan, one more for each revision.
        items: Every child the plan has made, in the order made.
        members: The ids of the current version's children, in plan order: the node's
            outcome, and the results it gathers, are theirs.
        limit: How many of its children may run at once (0: the graph's concurrency is
            the only limit).
    """

    hook: str
    version: int = 1
    items: tuple[PlanItem, ...] = ()
    members: tuple[str, ...] = ()
    limit: int = 0


class ErrorRecord(Value, frozen=True, kw_only=True):
    """One failure, recovery or emergency, kept in the run's error log."""

    time: datetime
    node: str
    state: str
    message: str
    severity: str = "error"
    recovered: bool = False
    details: Mapping[str, Any] = EMPTY


class RunState(Value, frozen=True, kw_only=True):
    """The whole state of a run after step ``seq``: what a snapshot holds.

    Attributes:
        run_id: The run id.
        graph: The graph name.
        graph_source: Where the graph came from: a built-in name or a file path.
        graph_digest: Digest of the graph definition the run started with.
        seq: The last committed step (0 is the run's creation).
        status: Run lifecycle status.
        input: The run's input (never changes).
        data: Shared data, merged per top-level key.
        nodes: Node id → node state.
        interrupts: Pending interrupts by id.
        errors: The error log, oldest first.
        writers: Data key → the node that wrote it last, as a 1-tuple (for conflict
            detection; snapshots of older versions list every writer, the last one last).
        created_at: When the run was created.
        updated_at: When ``seq`` was committed.
        plans: Node id → the plan it turned into children (see :class:`Plan`).
        definition: Key of the stored definition the run follows (the content digest of
            its graph, machine and script files as kept in the store); empty for a run
            created before definitions were stored, until it is pinned.
    """

    run_id: str
    graph: str
    graph_source: str
    graph_digest: str
    definition: str = ""
    seq: int
    status: RunStatus
    input: Mapping[str, Any]
    data: Mapping[str, Any]
    nodes: Mapping[str, NodeState]
    interrupts: Mapping[str, Interrupt] = EMPTY
    errors: tuple[ErrorRecord, ...] = ()
    writers: Mapping[str, tuple[str, ...]] = EMPTY
    created_at: datetime
    updated_at: datetime
    plans: Mapping[str, Plan] = EMPTY


class StepRecord(Value, frozen=True, kw_only=True):
    """What one step changed: the journal entry kept beside each snapshot.

    Applying a record to the run state at ``seq - 1`` gives the state at ``seq``
    (see :func:`apply_records`), so a store can keep full snapshots only now and then.

    Attributes:
        seq: The step number.
        time: When the step was committed.
        kind: ``created`` (seq 0), ``start`` (node entered its initial state),
            ``transition``, ``fail``, ``wait`` (a human gate opened), ``reply``,
            ``cancel``, ``status`` (run-level change), ``intent`` (a ``once`` effect is
            about to run), ``effect`` (a tool call's result), ``expand`` (a node's plan
            became its children), ``join`` (a node's children all ended), ``rollback``
            (a message under ``busy: rollback`` put a node back at the gate that began
            its turn) or ``migrate`` (the run moved to another stored definition, see
            :data:`MIGRATE`).
        node: The node that moved, if any.
        source: State path before the step.
        trigger: The trigger fired, if any.
        dest: State path after the step.
        result: The action result that chose the trigger (trigger, payload, output).
        data: Top-level data keys set by this step (values after any reducer), except
            those in ``appended``.
        appended: Top-level data keys whose list this step extended: key → the items
            added at its end (what an ``append`` reducer or an action that returned the
            list with new items appended added). The record carries what the step added,
            never the whole list again.
        nodes: Full new state of every node this step changed.
        status: Run status after the step.
        errors: Error records appended by this step.
        interrupts: The complete pending-interrupt map after the step, when it changed.
        events: Events raised while the step ran (loop detected, phase violation, ...),
            kept with the step so the history doubles as the run's event log.
        ledger: For an ``intent`` or ``effect`` step (a ``once`` effect about to run, a
            tool call's result) the ledger entry it commits to its node's step in
            flight; the node itself does not move.
        actor: Who made the decision this step records (a run's creation or fork, a
            reply, a cancellation), when one was named; ``None`` on every step the run
            took by itself.
        plan: For an ``expand`` step, the node's plan as it now stands (a new version).
    """

    seq: int
    time: datetime
    kind: str
    node: str | None = None
    source: tuple[str, ...] = ()
    trigger: str | None = None
    dest: tuple[str, ...] = ()
    result: Mapping[str, Any] = EMPTY
    data: Mapping[str, Any] = EMPTY
    appended: Mapping[str, list[Any]] = EMPTY
    nodes: Mapping[str, NodeState] = EMPTY
    status: RunStatus = RunStatus.RUNNING
    errors: tuple[ErrorRecord, ...] = ()
    interrupts: Mapping[str, Interrupt] | None = None
    events: tuple[Mapping[str, Any], ...] = ()
    ledger: LedgerEntry | None = None
    actor: Actor | None = None
    plan: Plan | None = None


def apply_records(state: RunState, records: Iterable[StepRecord]) -> RunState:
    """The run state after ``records``, given the state just before the first of them.

    The one fold of step records into a run state: a step applies its one record, a read
    applies the records stored after a snapshot. What the records change is gathered
    first and the run state (and its node map) built once at the end, so folding many
    records costs little more than folding one. No records: ``state`` itself.

    Raises:
        RunStateError: A record's seq does not follow the one before it, or a record
            appends to a data key that does not hold a list.
    """
    run_id, seq = state.run_id, state.seq
    data: dict[str, Any] | None = None
    writers: dict[str, tuple[str, ...]] | None = None
    nodes: Mapping[str, NodeState] = EMPTY
    errors: list[ErrorRecord] = []
    interrupts = state.interrupts
    plans: dict[str, Plan] | None = None
    last: StepRecord | None = None
    for last in records:
        if last.seq != seq + 1:
            raise _out_of_order(run_id, last.seq, seq)
        seq = last.seq
        changed, appended = last.data, last.appended
        if changed or appended:
            data = dict(state.data) if data is None else data
            if appended:
                data.update(extended_lists(run_id, seq, data, appended))
            data.update(changed)
            moved = _new_writers(state.writers if writers is None else writers, last)
            if moved:
                writers = dict(state.writers) if writers is None else writers
                writers.update(moved)
        if last.nodes:
            # One record's node map is used as it is; several are merged.
            nodes = last.nodes if not nodes else {**nodes, **last.nodes}
        elif last.ledger is not None:  # an intent or effect step: the node does not move
            nodes = _entered(state.nodes, nodes, last)
        errors += last.errors
        if last.interrupts is not None or last.plan is not None or last.kind == MIGRATE:
            # gates, plans, and moves to another definition: rare, folded elsewhere
            interrupts = last.interrupts if last.interrupts is not None else interrupts
            plans = _planned(state.plans if plans is None else plans, last)
            state, nodes = _migrated(state, nodes, last)
    if last is None:
        return state
    return RunState(
        run_id=run_id,
        graph=state.graph,
        graph_source=state.graph_source,
        graph_digest=state.graph_digest,
        definition=state.definition,
        seq=seq,
        status=last.status,
        input=state.input,
        data=state.data if data is None else MappingProxyType(data),
        nodes=updated_map(state.nodes, nodes),
        interrupts=interrupts,
        errors=state.errors + tuple(errors) if errors else state.errors,
        writers=state.writers if writers is None else MappingProxyType(writers),
        created_at=state.created_at,
        updated_at=last.time,
        plans=state.plans if plans is None else MappingProxyType(plans),
    )


def _migrated(
    state: RunState, nodes: Mapping[str, NodeState], record: StepRecord
) -> tuple[RunState, Mapping[str, NodeState]]:
    """The state and node changes so far, moved to the definition a ``migrate`` step names.

    Renamed nodes' old ids leave the node map: the whole map is then the change. Any
    other step leaves both as they are.
    """
    if record.kind != MIGRATE:
        return state, nodes
    result = record.result
    moved = replace(
        state,
        graph=str(result["graph"]),
        graph_source=str(result["graph_source"]),
        graph_digest=str(result["graph_digest"]),
        definition=str(result["definition"]),
    )
    dropped = result.get("dropped")
    if not dropped:
        return moved, nodes
    whole = {**state.nodes, **nodes}
    for old in dropped:
        whole.pop(old, None)
    return replace(moved, nodes=EMPTY), whole


def _planned(plans: Mapping[str, Plan], record: StepRecord) -> dict[str, Plan]:
    """``plans`` with the plan an ``expand`` record commits for its node (if it has one)."""
    if record.plan is None or record.node is None:
        return plans if isinstance(plans, dict) else dict(plans)
    return {**plans, record.node: record.plan}


def _entered(
    before: Mapping[str, NodeState], moved: Mapping[str, NodeState], record: StepRecord
) -> Mapping[str, NodeState]:
    """``moved`` with the record's ledger entry in its node's ledger (same call: replaced).

    One entry per call of the step, by its index: a fork's re-run of its parent's call
    replaces the parent's entry though its effect id is the fork's.
    """
    entry, node_id = record.ledger, record.node
    if entry is None or node_id is None:
        return moved
    node = moved.get(node_id) or before[node_id]
    kept = tuple(e for e in node.ledger if e.index != entry.index)
    return {**moved, node_id: replace(node, ledger=(*kept, entry))}


def _new_writers(
    writers: Mapping[str, tuple[str, ...]], record: StepRecord
) -> dict[str, tuple[str, ...]]:
    """The keys ``record`` wrote whose last writer changes, each → ``(record.node,)``.

    Only the last writer of a key matters to the write-conflict rule (the writers so far
    form a chain), so that is all that is kept: the map stays as small as the data, and
    the usual step (a node writing the keys it wrote before) changes nothing.
    """
    if record.node is None:
        return {}
    mine = (record.node,)
    keys = (*record.data, *record.appended)
    return {key: mine for key in keys if writers.get(key, ())[-1:] != mine}


def _out_of_order(run_id: str, seq: int, after: int) -> RunStateError:
    return RunStateError(f"step {seq} cannot follow step {after}", run_id=run_id, seq=seq)


def extended_lists(
    run_id: str, seq: int, data: Mapping[str, Any], appended: Mapping[str, Sequence[Any]]
) -> dict[str, list[Any]]:
    """The lists of ``data`` that step ``seq`` extends by ``appended``, items added at their end.

    Raises:
        RunStateError: A key ``appended`` extends does not hold a list in ``data``.
    """
    out: dict[str, list[Any]] = {}
    for key, items in appended.items():
        old = data.get(key)
        if type(old) is not list and type(old) is not tuple:
            raise RunStateError(
                f"run {run_id!r}: step {seq} appends to data key {key!r}, "
                f"which holds {type(old).__name__}, not a list: the stored run is inconsistent",
                run_id=run_id,
                seq=seq,
            )
        out[key] = [*old, *items]
    return out


def extension(old: Any, new: Any) -> list[Any] | None:
    """The items ``new`` adds at the end of ``old``, if ``new`` is ``old`` extended; else ``None``.

    Both must be lists (or tuples) and ``old`` not empty; ``new`` must start with exactly
    ``old``'s items (compared strictly: ``1``, ``1.0`` and ``True`` differ, as their stored
    bytes do). An unchanged list gives ``()``. Items are compared by identity first, so
    the usual case — an action that returned the list it was given plus new items — costs
    one pointer comparison per item.
    """
    if not old or not isinstance(old, list | tuple) or not isinstance(new, list | tuple):
        return None
    size = len(old)
    if len(new) < size:
        return None
    for before, after in zip(old, new, strict=False):
        if before is not after and not same_value(before, after):
            return None
    return list(new[size:])


def same_value(a: Any, b: Any) -> bool:
    """Whether two user-data values are stored as the same bytes (strict, by type)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            return len(a) == len(b) and all(map(same_value, a, b))
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            return _same_map(a, b)
        return False
    if kind is float:
        return (a == b and str(a) == str(b)) or (a != a and b != b)  # -0.0, nan
    if kind is list or kind is tuple:
        return len(a) == len(b) and all(map(same_value, a, b))
    if isinstance(a, Mapping):
        return _same_map(a, b)
    return bool(a == b)


def _same_map(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    return len(a) == len(b) and all(key in b and same_value(a[key], b[key]) for key in a)
