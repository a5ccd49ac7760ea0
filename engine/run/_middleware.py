"""Middleware: an onion of small callables wrapped around every action call.

Each middleware is ``async (ctx, call_next) -> ActionResult``. The chain is built once per
run from an ordered tuple: the first middleware is outermost, so ``before`` code runs
outside-in and ``after`` code inside-out. A graph's ``middleware:`` names built-ins
(:data:`MIDDLEWARE`); your own compose with :func:`chain` (public as
``phasegraph.run.chain``) around an action you bind in code.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from phasegraph.actions import Action, ActionContext, ActionResult, CallNext
from phasegraph.actions._failures import ERROR_TRIGGER
from phasegraph.errors import ErrorCode, LoopDetectedError, Problem, SpecError
from phasegraph.model import MiddlewareDef, StepRecord, replace
from phasegraph.spec._suggest import did_you_mean

__all__ = [
    "MIDDLEWARE",
    "Audit",
    "LoopDetection",
    "Middleware",
    "Timing",
    "build_middleware",
    "call_hash",
    "chain",
]


_RESET_ON = ("reflect", "recover")
"""Hooks that start a new attempt (quality-loop reflection, fallback-chain recovery)."""

_MAX_TRACKED = 4096
"""Windows kept at most (one per running node); the least recently used goes first."""


class Middleware(Protocol):
    """One layer of the onion: ``async def __call__(ctx, call_next) -> ActionResult``.

    It may change the context it passes on, skip ``call_next`` altogether, or change the
    result it returns.
    """

    def __call__(self, ctx: ActionContext, call_next: CallNext) -> Any:
        """Run around ``call_next(ctx)`` and return its (possibly changed) result."""
        ...


def chain(middleware: Sequence[Middleware], action: Action) -> Action:
    """Wrap ``action`` so that ``middleware[0]`` is the outermost layer.

    Bind the result in code, e.g. ``prepare(definition, source, actions={(node_id,
    hook): chain((outer, inner), action)})``; a graph's own ``middleware:`` then wraps it
    in turn. (The result is an async callable but not a coroutine function, so a
    ``python:`` binding, which runs plain functions in a thread, cannot name it.)

    Args:
        middleware: The layers, outermost first.
        action: The action at the centre.

    Returns:
        An action running every layer around ``action``.
    """
    wrapped: CallNext = action
    for layer in reversed(middleware):
        wrapped = _bind(layer, wrapped)
    return wrapped


def _bind(layer: Middleware, inner: CallNext) -> CallNext:
    # A plain function, not a coroutine: awaiting it awaits the layer's own coroutine,
    # so each layer costs one coroutine per call, not two.
    def call(ctx: ActionContext) -> Awaitable[ActionResult]:
        result: Awaitable[ActionResult] = layer(ctx, inner)
        return result

    return call


class Timing:
    """Adds the action's wall time, in milliseconds, to the step record's output."""

    def __init__(self, **_: Any) -> None:
        pass

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Time the rest of the chain."""
        started = time.perf_counter()
        result = await call_next(ctx)
        elapsed = round((time.perf_counter() - started) * 1000, 3)
        return _with_output(result, duration_ms=elapsed)


class Audit:
    """Records an ``action_called`` event with the hook, state and returned trigger."""

    def __init__(self, **_: Any) -> None:
        pass

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Record what the rest of the chain returned."""
        result = await call_next(ctx)
        ctx.emit("action_called", {"hook": ctx.hook, "state": ctx.state, "trigger": result.trigger})
        return result


class LoopDetection:
    """Warns about, then stops, a node that keeps repeating the same call.

    A window per run and node holds the :func:`call_hash` of its last ``window`` (5) action
    calls (hook, entering payload) and tool calls (name, arguments but the ``cwd`` a
    binding adds). A hash reaching ``threshold`` copies (2;
    ``with.loop_detection.threshold`` per node, e.g. 3 in keep-working loops) injects a
    corrective message (``ctx.messages``, or a tool result's ``loop_warning``) and emits
    ``loop_detected``; a detection right after one of the same kind (action calls, tool
    calls: an agent's turns interleave both) raises :class:`LoopDetectedError`. A
    ``reset_on`` hook (a new attempt) or a raised detection empties the window.

    The window is part of the run: each step's output records the hashes it checked
    (``loop_calls``; ``"r"`` for a reset), and a window is the replay of the node's
    committed steps, then of the tool results its step in flight already committed. A
    process keeps the window of each node's last step that returned, and rebuilds it
    from the run's history (``ctx.history``) when the node's next call is not the step
    after that one (the first call in a process, a resume, a lost commit): a resumed run
    detects a loop at the same call as one that never stopped.
    """

    def __init__(
        self, *, window: int = 5, threshold: int = 2, reset_on: Sequence[str] = _RESET_ON
    ) -> None:
        if window < 1 or threshold < 2:
            raise SpecError([Problem("loop_detection needs window >= 1 and threshold >= 2")])
        self._size, self._threshold, self._reset_on = window, threshold, frozenset(reset_on)
        # (run, node) -> (the node's step the window is ready for, the window)
        self._windows: dict[tuple[str, str], tuple[int, _Window]] = {}

    async def __call__(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Check the action call, and watch the tool calls it makes."""
        key = (ctx.run_id, ctx.node_id)
        threshold = _threshold(ctx, self._threshold)
        kept = self._windows.pop(key, None)
        if ctx.hook in self._reset_on:
            window, checked = _Window(self._size), [_RESET]
        else:
            if kept is not None and kept[0] == ctx.steps:
                window = kept[1]
            else:  # this process did not run the node's last step: the run's history says
                window = await self._rebuilt(ctx, threshold)
            digest = _ACTION + call_hash(ctx.hook, ctx.payload)
            checked = [digest]
            if warning := _verdict(window, digest, threshold, ctx, ctx.hook):
                ctx = replace(ctx, messages=(*ctx.messages, warning))
        # The tool results an earlier attempt at this step committed: not called again.
        for entry in ctx.ledger:
            if entry.index >= 0 and entry.result is not None:
                checked.append(digest := _TOOL + _ledgered(entry.tool, entry.arguments))
                window.observe(digest, threshold)
        inner = ctx.tool

        async def tool(name: str, /, **arguments: Any) -> Mapping[str, Any]:
            digest = _TOOL + _ledgered(name, arguments)
            checked.append(digest)
            warning = _verdict(window, digest, threshold, ctx, name)
            result = await inner(name, **arguments)
            return {**result, "loop_warning": warning} if warning else result

        result = await call_next(replace(ctx, tool=tool))
        # Kept only for a step that returned: a raise is committed as the node's failure
        # (its calls with it, to the history's replay: none); the next call rebuilds.
        self._windows[key] = (ctx.steps + 1, window)
        if len(self._windows) > _MAX_TRACKED:  # the least recently used goes first
            del self._windows[next(iter(self._windows))]
        return _with_output(result, loop_calls=checked)

    async def _rebuilt(self, ctx: ActionContext, threshold: int) -> _Window:
        window = _Window(self._size)
        if ctx.steps == 0:  # no step of the node committed yet: nothing to read
            return window
        for record in await ctx.history():
            output = record.result.get("output")
            calls = output.get("loop_calls") if isinstance(output, Mapping) else None
            if calls is None:  # no action returned: a failure (a raised detection?), a reply
                if _raised_loop(record):
                    window = _Window(self._size)
                continue
            for digest in calls:
                if digest == _RESET or window.observe(str(digest), threshold) == _STOP:
                    window = _Window(self._size)
        return window


_ACTION, _TOOL, _RESET = "a", "t", "r"
"""A recorded hash's prefix (a warning escalates within one kind of call), and a reset."""

_QUIET, _WARN, _STOP = 0, 1, 2


class _Window:
    """The last calls of one node and, per kind of call, whether the last one warned."""

    __slots__ = ("calls", "warned")

    def __init__(self, size: int) -> None:
        self.calls: deque[str] = deque(maxlen=size)
        self.warned = {_ACTION: False, _TOOL: False}

    def observe(self, digest: str, threshold: int) -> int:
        """Add a call (its kind prefixed to its hash): quiet, warn or stop."""
        self.calls.append(digest)
        kind = digest[:1]
        if self.calls.count(digest) < threshold:
            self.warned[kind] = False
            return _QUIET
        if self.warned[kind]:
            return _STOP
        self.warned[kind] = True
        return _WARN


def _verdict(window: _Window, digest: str, threshold: int, ctx: ActionContext, name: str) -> str:
    """Observe a live call: the warning to inject ("" if none), or raise on a second one."""
    verdict = window.observe(digest, threshold)
    if verdict == _QUIET:
        return ""
    count, size = window.calls.count(digest), len(window.calls)
    if verdict == _STOP:
        text = f"still {_repeated(name, count, size)} after a warning"
        raise LoopDetectedError(text, run_id=ctx.run_id, node_id=ctx.node_id)
    message = f"You are {_repeated(name, count, size)}; change your approach."
    ctx.emit("loop_detected", {"call": name, "count": count, "message": message})
    return message


def _ledgered(name: str, arguments: Mapping[str, Any]) -> str:
    # The model's own arguments: a ``tools:`` binding adds its ``cwd`` to the call, not to
    # the ledger entry a resumed step replays instead of calling the tool.
    return call_hash(name, {k: v for k, v in arguments.items() if k != "cwd"})


def _raised_loop(record: StepRecord) -> bool:
    """Whether the step is the failure of an action that raised :class:`LoopDetectedError`."""
    found = record.result.get("error" if record.kind == "fail" else "payload")
    if record.kind != "fail" and record.trigger != ERROR_TRIGGER:
        return False
    return isinstance(found, Mapping) and found.get("error_code") == ErrorCode.LOOP_DETECTED


def _threshold(ctx: ActionContext, default: int) -> int:
    configured = ctx.settings.get("loop_detection")
    return int(configured.get("threshold", default)) if isinstance(configured, Mapping) else default


def _repeated(name: str, count: int, size: int) -> str:
    return f"repeating {name} with the same arguments ({count} times in the last {size} calls)"


def call_hash(name: str, arguments: Any) -> str:
    """A stable digest of a call: its name and the canonical JSON of its arguments.

    Eight bytes (16 hex digits): every step records the digests it checked, and a window
    compares a handful, where a chance collision (1 in 2**64) does not happen.
    """
    try:
        text = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=_plain)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted: fall back to repr
        text = repr((name, arguments))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(repr(item) for item in value)
    return repr(value)


def _with_output(result: ActionResult, **extra: Any) -> ActionResult:
    return ActionResult(
        trigger=result.trigger,
        data=result.data,
        payload=result.payload,
        output=MappingProxyType({**result.output, **extra}),
    )


MIDDLEWARE: Mapping[str, Callable[..., Middleware]] = MappingProxyType(
    {"timing": Timing, "audit": Audit, "loop_detection": LoopDetection}
)
"""Built-in middleware by the name graphs use."""


def build_middleware(definitions: Sequence[MiddlewareDef]) -> tuple[Middleware, ...]:
    """Instantiate a graph's middleware, outermost first.

    Raises:
        SpecError: An unknown name or bad settings (every problem at once).
    """
    built: list[Middleware] = []
    problems: list[Problem] = []
    for definition in definitions:
        factory = MIDDLEWARE.get(definition.name)
        if factory is None:
            known = ", ".join(sorted(MIDDLEWARE))
            problems.append(
                Problem(
                    f"unknown middleware {definition.name!r} (known: {known})", definition.location
                )
            )
            continue
        where = f"middleware {definition.name!r}"
        taken = [
            p.name
            for p in inspect.signature(factory).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        unknown = [key for key in definition.config if key not in taken]
        if unknown:
            problems += [
                Problem(
                    f"{where}: unknown setting {key!r}{did_you_mean(key, taken)} "
                    f"(settings: {', '.join(taken) or 'none'})",
                    definition.location,
                )
                for key in unknown
            ]
            continue
        try:
            built.append(factory(**definition.config))
        except TypeError as exc:
            problems.append(Problem(f"{where}: {exc}", definition.location))
        except SpecError as exc:  # a value it refuses: say where
            problems += [
                Problem(f"{where}: {p.message}", definition.location) for p in exc.problems
            ]
    if problems:
        raise SpecError(problems)
    return tuple(built)
