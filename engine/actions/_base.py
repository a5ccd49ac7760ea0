"""The action contract: what a bound hook runs, what it sees, what it returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final, Protocol, TypeVar

from phasegraph.errors import ActionError
from phasegraph.model import EMPTY, Effect, LedgerEntry, StepRecord, Value

__all__ = [
    "Action",
    "ActionContext",
    "ActionResult",
    "CallNext",
    "EventSink",
    "Pricer",
    "SpendSink",
    "ToolCall",
    "ToolOffer",
    "carry_effect",
    "carry_writes",
    "declare_effect",
    "declared_writes",
    "declares_writes",
    "effect_of",
    "writes_data",
]

EventSink = Callable[[str, Mapping[str, Any]], None]
"""Records an event (kind, fields) raised while an action runs; kept with its step."""

ToolOffer = Callable[[Sequence[str]], Awaitable[Sequence[Mapping[str, Any]]]]
"""Describes the named tools the node may call in its current state (for a model).

Awaited: describing a tool of an MCP server may start the server."""

CALL_EFFECT_ID: ContextVar[str] = ContextVar("phasegraph_call_effect_id", default="")
"""The effect id of the tool call being made (``Scope.effect_id``), set around the call so
that its arguments, which middleware reads and hashes, stay the model's own."""

CALL_STARTING: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "phasegraph_call_starting", default=None
)
"""Awaited once a tool call has passed every rule and check and is about to run: a
``once`` call's intent is committed there, so a call refused before it never had one."""

EffectSink = Callable[[str, LedgerEntry], Awaitable[None]]
"""Commits a ledger entry (an intent, or a call's result) to a node's step in flight."""

EffectKinds = Callable[[str], Effect]
"""The effect kind of a tool, by name."""

SpendSink = Callable[["ActionContext", Sequence[str], int, int, Mapping[str, int]], Awaitable[None]]
"""Reserves a model call's most against the run's budget, committed before it is sent:
``(ctx, model names, prompt tokens, completion tokens, spent by the step so far)``.
Raises :class:`~phasegraph.errors.SpendRefusedError` when it does not fit."""

Pricer = Callable[[Sequence[str], int, int], Mapping[str, int]]
"""What a model call spent, by budget: ``tokens``, and ``money`` in millionths when the
first of the model names with a price has one."""


async def _reserve_nothing(
    ctx: ActionContext,
    models: Sequence[str],
    prompt: int,
    completion: int,
    used: Mapping[str, int],
) -> None:
    """What ``reserve`` does in a context built outside a run: nothing is limited."""


def _tokens_only(models: Sequence[str], prompt: int, completion: int) -> Mapping[str, int]:
    return {"tokens": prompt + completion}


HistoryReader = Callable[[str], Awaitable[Sequence[StepRecord]]]
"""Reads the committed step records of a node, oldest first."""


async def _keep_nothing(node_id: str, entry: LedgerEntry) -> None:
    """What ``record_effect`` does in a context built outside a run: nothing."""


def _once(name: str) -> Effect:
    return Effect.ONCE


async def _no_history(node_id: str) -> Sequence[StepRecord]:
    """What ``history`` reads in a context built outside a run: nothing."""
    return ()


async def _offer_nothing(names: Sequence[str]) -> Sequence[Mapping[str, Any]]:
    return ()


class ActionResult(Value, frozen=True, kw_only=True, gc=True):  # may hold anything
    """What an action returns: the trigger to fire and what to change.

    Attributes:
        trigger: The trigger to fire; must be legal in the node's current state.
        data: Updates to the run's shared data, merged per top-level key.
        payload: Facts the machine's guards may read (``payload:KEY`` predicates).
        output: Diagnostics kept in the step record only (stdout tails, timings, ...).
        spend: Units to add to the node's budget counters before the trigger fires, by
            budget name at the action's level (an ``llm:`` action spends ``tokens``), so a
            guard such as ``budget:tokens`` sees them.
    """

    trigger: str
    data: Mapping[str, Any] = EMPTY
    payload: Mapping[str, Any] = EMPTY
    output: Mapping[str, Any] = EMPTY
    spend: Mapping[str, int] = EMPTY


class ToolCall(Protocol):
    """Calls one tool with keyword arguments and returns its structured result."""

    def __call__(self, name: str, /, **arguments: Any) -> Awaitable[Mapping[str, Any]]:
        """Call tool ``name``."""
        ...


def _drop_event(kind: str, fields: Mapping[str, Any]) -> None:
    """What ``emit`` and ``stream`` do in a context built without them: nothing."""


async def _no_tools(name: str, /, **arguments: Any) -> Mapping[str, Any]:
    raise ActionError(f"tool {name!r} called, but this node has no tools configured")


class ActionContext(Value, frozen=True, kw_only=True, gc=True):  # may hold anything
    """Everything an action may read, frozen for the duration of the call.

    Attributes:
        run_id: The run.
        node_id: The node whose state the action runs in.
        state: The node's state path (``parent/child``).
        hook: The hook the action is bound to.
        input: The run's input.
        data: The run's shared data as of the last committed step (read-only).
        settings: The node's ``with`` settings.
        counters: Budget units spent so far.
        limits: Budget limits for this node.
        steps: Transitions the node has taken so far.
        payload: The payload of the trigger that entered this state.
        messages: Corrective messages injected by middleware (e.g. loop detection).
        emit: Records an event that is committed with this step.
        tool: Calls a tool by name (``await ctx.tool("write_file", path=..., text=...)``)
            through the node's tool rules (e.g. the current phase's whitelist).
        offer: Describes the named tools the current phase allows (JSON Schema function
            entries, the ones a model is shown; ``await ctx.offer([...])``); refused
            names are left out.
        stream: Publishes a live event that is *not* committed (e.g. a model's token
            deltas): listeners see it now, the history never holds it.
        attempt: Which attempt at this step this call is: the fencing token of the lease
            it runs under, larger for every process that took the run over (after a
            crash, a lost lease or a worker's death), so two attempts never share it.
        call_step: In a state that ``retries`` another, the step of the call it makes
            again: the effect ids are that call's (``None``: this step's own).
        ledger: The effects of this step already committed by an earlier attempt (see
            :class:`~phasegraph.model.LedgerEntry`): a call with a result must not run
            again; an intent without one is an outcome nobody knows.
        effect_sink: Commits a ledger entry of a node now (what :meth:`record_effect`
            calls; the run's, shared by every call, so no call binds its own).
        tool_effect: The effect kind of a tool, by name.
        item: For a child of a plan, its item as the plan gave it (``None`` otherwise);
            templates read it as ``{item}`` and ``{item[FIELD]}``.
        spend_sink: Reserves a model call's most against the run's budget (what
            :meth:`reserve` calls).
        price: What a model call spent, by budget (``tokens``, ``money``).
        history_reader: Reads a node's committed step records from the store (what
            :meth:`history` calls; the run's, shared by every call, as ``effect_sink``).
    """

    run_id: str
    node_id: str
    state: str
    hook: str
    input: Mapping[str, Any]
    data: Mapping[str, Any]
    settings: Mapping[str, Any] = EMPTY
    counters: Mapping[str, int] = EMPTY
    limits: Mapping[str, int] = EMPTY
    steps: int = 0
    payload: Mapping[str, Any] = EMPTY
    messages: tuple[str, ...] = ()
    emit: EventSink = _drop_event
    tool: ToolCall = _no_tools
    offer: ToolOffer = _offer_nothing
    stream: EventSink = _drop_event
    attempt: int = 0
    ledger: tuple[LedgerEntry, ...] = ()
    call_step: int | None = None
    effect_sink: EffectSink = _keep_nothing
    tool_effect: EffectKinds = _once
    item: Any = None
    spend_sink: SpendSink = _reserve_nothing
    price: Pricer = _tokens_only
    history_reader: HistoryReader = _no_history

    @property
    def effect_id(self) -> str:
        """``run:node:step``, the same for every attempt at this step, new for the next.

        A step's action runs at least once (again after a crash before its commit), and
        its result is committed exactly once: pass this id to a side effect that can
        deduplicate (a payment API's idempotency key, a unique row) so it happens once.
        ``step`` is the number of transitions the node had taken when the action started,
        or, in a state that ``retries`` another (a recovery's retry), the step of the call
        it makes again: every attempt of one call has one id. A tool call's id adds its
        index in the model's message (``Scope.effect_id``).
        """
        step = self.steps if self.call_step is None else self.call_step
        return f"{self.run_id}:{self.node_id}:{step}"

    def history(self) -> Awaitable[Sequence[StepRecord]]:
        """The node's committed step records, oldest first, read from the store.

        A read of the run's journal: for what a middleware rebuilds when a process meets
        a run it did not drive (loop detection's window after a resume), not for every
        call.
        """
        return self.history_reader(self.node_id)

    def record_effect(self, entry: LedgerEntry) -> Awaitable[None]:
        """Commit ``entry`` to this node's step in flight now, before the step commits."""
        return self.effect_sink(self.node_id, entry)

    @property
    def spend_limited(self) -> bool:
        """Whether the run's budget limits model calls (a call then reserves first)."""
        return self.spend_sink is not _reserve_nothing

    def reserve(
        self,
        models: Sequence[str],
        prompt: int,
        completion: int,
        used: Mapping[str, int] | None = None,
    ) -> Awaitable[None]:
        """Reserve a model call's most (``prompt`` plus ``completion`` tokens) before it is sent.

        The reservation is committed before this returns; the step's commit settles it
        with what the step spent (its result's ``spend``), a failure releases it.

        Raises:
            SpendRefusedError: The run's budget has not that much left.
        """
        return self.spend_sink(self, models, prompt, completion, used or {})

    @property
    def idempotency_key(self) -> str:
        """The same as :attr:`effect_id` (its earlier name)."""
        return self.effect_id

    def values(self) -> Mapping[str, Any]:
        """Input and data merged (data wins), as templates see them.

        A plan's child adds its ``item``.
        """
        if self.item is None:
            return {**self.input, **self.data}
        return {**self.input, **self.data, "item": self.item}


Action = Callable[[ActionContext], Awaitable[ActionResult]]
"""A compiled action: an async callable from context to result."""

CallNext = Action
"""The rest of the middleware chain (and finally the action itself)."""


_EFFECT: Final = "phasegraph_effect"
_Function = TypeVar("_Function", bound=Callable[..., Any])


def declare_effect(kind: Effect | str) -> Callable[[_Function], _Function]:
    """Declare what calling a tool or action function again does (see :class:`Effect`).

    A tool that declares nothing is taken as ``once``: it must not run twice. An action
    that declares nothing is ``idempotent`` (an ``http:`` POST or PATCH, ``once``); a
    binding's own ``effect:`` wins over what its function declares.
    """
    declared = Effect(kind)

    def mark(function: _Function) -> _Function:
        setattr(function, _EFFECT, declared)
        return function

    return mark


def carry_effect(source: object, wrapper: _Function) -> _Function:
    """Give ``wrapper`` (an action built around ``source``) the effect ``source`` declared."""
    declared = getattr(source, _EFFECT, None)
    return wrapper if declared is None else declare_effect(declared)(wrapper)


def effect_of(function: object, default: Effect = Effect.ONCE) -> Effect:
    """The effect kind ``function`` declared with :func:`declare_effect` (else ``default``)."""
    declared = getattr(function, _EFFECT, None)
    return declared if isinstance(declared, Effect) else default


KeysFor = Callable[[Mapping[str, Any]], Sequence[str]]
"""The data keys an action writes, given its node's ``with`` settings."""

_WRITES: Final = "phasegraph_writes"


def writes_data(keys: KeysFor) -> Callable[[_Function], _Function]:
    """Declare the data keys an action function writes (given its node's ``with``).

    A node that binds it may write those keys whatever its ``writes:`` says, and the
    write-conflict rule counts them among the node's writes wherever ``writes:`` is
    declared, so ``check`` and ``run`` judge the node alike.
    """

    def mark(function: _Function) -> _Function:
        setattr(function, _WRITES, keys)
        return function

    return mark


def declares_writes(action: object) -> bool:
    """Whether ``action`` declared keys with :func:`writes_data` (most actions do not)."""
    return getattr(action, _WRITES, None) is not None


def declared_writes(action: object, settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys ``action`` declared with :func:`writes_data` (none if it declared none)."""
    keys: KeysFor | None = getattr(action, _WRITES, None)
    return () if keys is None else tuple(str(key) for key in keys(settings))


def carry_writes(source: object, wrapper: _Function) -> _Function:
    """Give ``wrapper`` (an action built around ``source``) the keys ``source`` declared."""
    keys = getattr(source, _WRITES, None)
    return wrapper if keys is None else writes_data(keys)(wrapper)
