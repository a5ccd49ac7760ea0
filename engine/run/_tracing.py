"""OpenTelemetry traces of runs: the one module that imports ``opentelemetry``.

Imported only when tracing is on (``Engine(store, tracer_provider=...)``, or the CLI's
``--otel``), so phasegraph runs without the ``otel`` extra installed. Two seams feed it:

* the event bus (:meth:`Tracing.listen`): a ``phasegraph.run`` span per run as this
  process drives it, a ``node {id}`` span per node under it, from the committed events
  (a run that waits or parks ends its span; resuming it opens a new one);
* the outermost middleware (:meth:`Tracing.middleware`): a ``{node} {hook}`` span per
  action call under its node's span (a ``shell:`` step's with its command, exit status
  and the end of its stderr), a ``chat {model}`` span for a model call (GenAI semantic
  conventions, from the ``llm:`` step's output: model, token usage, finish reason) and an
  ``execute_tool {name}`` span per tool call, with the model's call id.

**One trace per run.** The trace id is the run's own (derived from its id), so every
drive of a run, in any process, after any wait, is in the run's one trace: each drive's
``phasegraph.run`` span is a child of the run's root span, whose id is derived too. The
drive that starts the run sends that root span itself when the provider is
:func:`otlp_provider`'s (the CLI's), whose id generator can be asked for the run's ids;
with a provider of the caller's own, the root is the parent the drives name.

**Content** (``content=True``, ``--otel-content`` or the standard
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; off by default): a model
call's span carries ``gen_ai.system_instructions``, ``gen_ai.input.messages`` and
``gen_ai.output.messages``, a tool call's ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result`` (JSON), with the value of every secret-named environment
variable (``*KEY``, ``*TOKEN``, ``*SECRET``, ``*PASSWORD``) replaced by ``***``.

The library never installs a global tracer provider; :func:`otlp_provider` builds the
one the CLI uses (OTLP over HTTP, configured by the standard ``OTEL_*`` variables).
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from phasegraph._vocabulary import CAPTURE_CONTENT_ENV
from phasegraph.actions import ActionContext, ActionResult, CallNext
from phasegraph.core._secrets import SecretMasker
from phasegraph.events import Event, ends_run
from phasegraph.model import replace

__all__ = ["Tracing", "otlp_provider", "run_root"]

_SCOPE: Final = "phasegraph"
_NODE_ENDS: Final = frozenset({"node_completed", "node_failed", "node_skipped", "node_cancelled"})
_DRIVE_ENDS: Final = frozenset({"run_waiting", "run_parked"})
"""Run events after which this process stops driving the run (it is not over)."""
_MAX_OPEN: Final = 4096
"""Runs whose spans stay open at most: a drive cut off (lease lost) sends no end event."""
_STDERR_CHARS: Final = 1000
"""How much of a command's stderr its step span keeps (the end: where errors are said)."""
_WANTED: Final = contextvars.ContextVar[tuple[int, int] | None]("phasegraph_span_ids", default=None)
"""The ids :class:`_RunIds` gives the next span it makes (a run's root), when set."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def run_root(run_id: str) -> trace.SpanContext:
    """The run's root span context: its trace id and root span id, derived from its id."""
    digest = hashlib.sha256(f"phasegraph run {run_id}".encode()).digest()
    return trace.SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


class _RunIds(RandomIdGenerator):
    """Random ids, except for a run's root span: the ids derived from the run's id."""

    def generate_trace_id(self) -> int:
        wanted = _WANTED.get()
        return wanted[0] if wanted is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        wanted = _WANTED.get()
        return wanted[1] if wanted is not None else super().generate_span_id()


@dataclass(slots=True)
class _Open:
    """The spans open for one run: its own and its nodes'."""

    run: trace.Span
    nodes: dict[str, trace.Span] = field(default_factory=dict)


class Tracing:
    """Turns one engine's runs into spans of ``tracer_provider``.

    Args:
        tracer_provider: An OpenTelemetry ``TracerProvider`` (the SDK's, set up by the
            caller); ``None`` uses the global one.
    """

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, *, content: bool | None = None
    ) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self._runs: dict[str, _Open] = {}
        # Whether the provider makes a run's root span with the run's own ids.
        self._roots = isinstance(getattr(tracer_provider, "id_generator", None), _RunIds)
        self._content = _truthy(os.environ.get(CAPTURE_CONTENT_ENV)) if content is None else content
        self._mask = SecretMasker(os.environ)

    # -- the bus: runs and nodes ------------------------------------------------------

    def listen(self, event: Event) -> None:
        """Open and close run and node spans from a committed event."""
        if event.live:
            return
        self._run(event.run_id, event.seq)
        if event.kind == "node_started" and event.node is not None:
            self._node(event.run_id, event.node)
        elif event.kind in _NODE_ENDS and event.node is not None:
            self._end_node(event)
        elif event.kind == "transition" and event.node is not None:
            fields = {k: str(v) for k, v in event.fields.items() if v is not None}
            self._node(event.run_id, event.node).add_event(
                "transition", {"phasegraph.seq": event.seq, **fields}
            )
        elif ends_run(event) or event.kind in _DRIVE_ENDS:
            self._end_run(event)

    def _run(self, run_id: str, seq: int | None = None) -> _Open:
        opened = self._runs.get(run_id)
        if opened is None:
            root = run_root(run_id)
            attributes: dict[str, Any] = {"phasegraph.run.id": run_id}
            if seq is not None and seq <= 1 and self._roots:
                # This drive starts the run (its first step after the created one): its
                # span is the run's root, with the ids every later drive names as parent.
                token = _WANTED.set((root.trace_id, root.span_id))
                try:
                    span = self._tracer.start_span(
                        "phasegraph.run", context=otel_context.Context(), attributes=attributes
                    )
                finally:
                    _WANTED.reset(token)
            else:
                parent = trace.set_span_in_context(trace.NonRecordingSpan(root))
                attributes["phasegraph.run.resumed"] = seq is None or seq > 1
                span = self._tracer.start_span(
                    "phasegraph.run", context=parent, attributes=attributes
                )
            opened = self._runs[run_id] = _Open(span)
            if len(self._runs) > _MAX_OPEN:  # the oldest was cut off: end what it left open
                self._close(self._runs.pop(next(iter(self._runs))), "run_stopped")
        return opened

    def _node(self, run_id: str, node_id: str) -> trace.Span:
        opened = self._run(run_id)
        span = opened.nodes.get(node_id)
        if span is None:
            span = self._tracer.start_span(
                f"node {node_id}",
                context=trace.set_span_in_context(opened.run),
                attributes={"phasegraph.run.id": run_id, "phasegraph.node.id": node_id},
            )
            opened.nodes[node_id] = span
        return span

    def _end_node(self, event: Event) -> None:
        opened = self._runs.get(event.run_id)
        span = opened.nodes.pop(str(event.node), None) if opened else None
        if span is None:
            return
        span.set_attribute("phasegraph.node.status", event.kind.removeprefix("node_"))
        if "outcome" in event.fields:
            span.set_attribute("phasegraph.node.outcome", str(event.fields["outcome"]))
        if event.kind == "node_failed":
            span.set_status(trace.StatusCode.ERROR, str(event.fields.get("error", "")))
        span.end()

    def _end_run(self, event: Event) -> None:
        opened = self._runs.pop(event.run_id, None)
        if opened is not None:
            self._close(opened, event.kind)

    @staticmethod
    def _close(opened: _Open, kind: str) -> None:
        for span in opened.nodes.values():  # still running: the drive stops here
            span.end()
        opened.run.set_attribute("phasegraph.run.status", kind.removeprefix("run_"))
        if kind == "run_failed":
            opened.run.set_status(trace.StatusCode.ERROR)
        opened.run.end()

    # -- the middleware: steps, model calls, tool calls -------------------------------

    async def middleware(self, ctx: ActionContext, call_next: CallNext) -> ActionResult:
        """Wrap an action call in a step span; its model and tool calls in their own."""
        node = self._node(ctx.run_id, ctx.node_id)
        attributes = {
            "phasegraph.run.id": ctx.run_id,
            "phasegraph.node.id": ctx.node_id,
            "phasegraph.state": ctx.state,
            "phasegraph.hook": ctx.hook,
        }
        started = time.time_ns()
        with self._tracer.start_as_current_span(
            f"{ctx.node_id} {ctx.hook}",
            context=trace.set_span_in_context(node),
            attributes=attributes,
        ) as step:
            tools = _ToolTracer(self._tracer, ctx, self._mask if self._content else None)
            result = await call_next(replace(ctx, tool=tools))
            step.set_attribute("phasegraph.trigger", result.trigger)
            _command(step, result.output)
            self._model_call(step, result, started)
        return result

    def _model_call(self, step: trace.Span, result: ActionResult, started: int) -> None:
        """The ``llm:`` step's model call, from its output (seen only once it answered)."""
        output = result.output
        usage = output.get("usage")
        model = output.get("model")
        if not isinstance(usage, Mapping) or "finish_reason" not in output or model is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": str(model),
            "gen_ai.response.model": str(model),
            "gen_ai.response.finish_reasons": [str(output["finish_reason"])],
            "gen_ai.usage.input_tokens": int(usage.get("prompt_tokens", 0)),
            "gen_ai.usage.output_tokens": int(usage.get("completion_tokens", 0)),
        }
        if output.get("id"):
            attributes["gen_ai.response.id"] = str(output["id"])
        if self._content:
            attributes |= self._messages(result)
        span = self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(step),
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            start_time=started,
        )
        span.end()

    def _messages(self, result: ActionResult) -> dict[str, str]:
        """The call's content as the GenAI conventions name it, secrets masked."""
        found: dict[str, str] = {}
        system = result.output.get("system")
        if isinstance(system, str):
            found["gen_ai.system_instructions"] = self._mask([{"type": "text", "content": system}])
        conversation = _answered(result.data)
        if conversation:
            found["gen_ai.input.messages"] = self._mask(_parts(conversation[:-1]))
            found["gen_ai.output.messages"] = self._mask(
                _parts(conversation[-1:], str(result.output.get("finish_reason", "")))
            )
        return found


def _command(step: trace.Span, output: Mapping[str, Any]) -> None:
    """A ``shell:`` step's command, exit status and the end of its stderr."""
    argv = output.get("argv")
    if not isinstance(argv, Sequence) or isinstance(argv, str):
        return
    step.set_attribute("process.command_args", [str(arg) for arg in argv])
    if isinstance(output.get("exit"), int):
        step.set_attribute("process.exit.code", int(output["exit"]))
    stderr = str(output.get("stderr") or "")
    if stderr:
        step.set_attribute("phasegraph.stderr", stderr[-_STDERR_CHARS:])
    if output.get("exit") != 0:
        step.set_status(trace.StatusCode.ERROR, f"exit status {output.get('exit')}")


def _answered(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conversation an ``llm:`` step wrote: the message list ending with the answer."""
    for value in data.values():
        last = value[-1] if isinstance(value, list | tuple) and value else None
        if isinstance(last, Mapping) and last.get("role") == "assistant":
            return [m for m in value if isinstance(m, Mapping)]
    return []


def _parts(messages: Sequence[Mapping[str, Any]], finish: str = "") -> list[dict[str, Any]]:
    """Chat messages in the GenAI conventions' shape: a role and typed parts."""
    shaped = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.get("content"):
            kind = "tool_call_response" if message.get("role") == "tool" else "text"
            part: dict[str, Any] = {"type": kind, "content": message["content"]}
            if kind == "tool_call_response":
                part = {
                    "type": kind,
                    "id": message.get("tool_call_id"),
                    "response": message["content"],
                }
            parts.append(part)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        if message.get("refusal"):
            parts.append({"type": "refusal", "content": message["refusal"]})
        entry: dict[str, Any] = {"role": message.get("role"), "parts": parts}
        if finish and message.get("role") == "assistant":
            entry["finish_reason"] = finish
        shaped.append(entry)
    return shaped


class _ToolTracer:
    """``ctx.tool`` with a span per call, named by the model's call id when it has one.

    The call id is not passed to ``ctx.tool``: the ``tools:`` action answers the calls of
    the conversation's last assistant message in order, so the first pending call of the
    same name is this one.
    """

    __slots__ = ("_ctx", "_mask", "_pending", "_tracer")

    def __init__(
        self, tracer: trace.Tracer, ctx: ActionContext, mask: SecretMasker | None = None
    ) -> None:
        self._tracer, self._ctx, self._mask = tracer, ctx, mask
        self._pending: list[tuple[str, str]] | None = None

    async def __call__(self, name: str, /, **arguments: Any) -> Mapping[str, Any]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        call_id = self._call_id(name)
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        if self._mask is not None:
            attributes["gen_ai.tool.call.arguments"] = self._mask(arguments)
        with self._tracer.start_as_current_span(
            f"execute_tool {name}", attributes=attributes
        ) as span:
            result = await self._ctx.tool(name, **arguments)
            if self._mask is not None:
                span.set_attribute("gen_ai.tool.call.result", self._mask(dict(result)))
            if "error" in result:  # refused or failed: the model reads why
                span.set_attribute("error.type", str(result["error"]))
                span.set_status(trace.StatusCode.ERROR, str(result.get("message", "")))
            return result

    def _call_id(self, name: str) -> str:
        if self._pending is None:
            self._pending = _pending_calls(self._ctx.data)
        for index, (pending, call_id) in enumerate(self._pending):
            if pending == name:
                del self._pending[index]
                return call_id
        return ""


def _pending_calls(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(tool name, call id)`` of every conversation that ends with tool calls."""
    calls: list[tuple[str, str]] = []
    for value in data.values():
        last = value[-1] if isinstance(value, list | tuple) and value else None
        if isinstance(last, Mapping) and last.get("role") == "assistant":
            for call in last.get("tool_calls") or ():
                function = call.get("function") or {}
                calls.append((str(function.get("name", "")), str(call.get("id", ""))))
    return calls


def otlp_provider() -> TracerProvider:
    """A tracer provider exporting over OTLP/HTTP in batches, flushed at exit.

    The endpoint and headers come from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
    ``..._TRACES_ENDPOINT``) and ``OTEL_EXPORTER_OTLP_HEADERS``; the service is
    ``phasegraph`` unless ``OTEL_SERVICE_NAME`` names another.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    named = os.environ.get("OTEL_SERVICE_NAME")
    resource = Resource.create({} if named else {"service.name": "phasegraph"})
    # Its id generator gives a run's root span the run's own ids (one trace per run).
    provider = TracerProvider(resource=resource, id_generator=_RunIds())  # flushed at exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
