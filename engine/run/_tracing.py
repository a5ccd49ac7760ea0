"""OpenTelemetry traces of runs: the one module that imports ``opentelemetry``.

Imported only when tracing is on (``Engine(store, tracer_provider=...)``, or the CLI's
``--otel``), so phasegraph runs without the ``otel`` extra installed. Two seams feed it:

* the event bus (:meth:`Tracing.listen`): a ``phasegraph.run`` span per run as this
  process drives it, a ``phasegraph.node`` span per node under it, from the committed
  events (a run that waits or parks ends its span; resuming it opens a new one);
* the outermost middleware (:meth:`Tracing.middleware`): a ``phasegraph.step`` span per
  action call under its node's span, a ``chat {model}`` span for a model call (GenAI
  semantic conventions, from the ``llm:`` step's output: model, token usage, finish
  reason) and an ``execute_tool {name}`` span per tool call, with the model's call id.

The library never installs a global tracer provider; :func:`otlp_provider` builds the
one the CLI uses (OTLP over HTTP, configured by the standard ``OTEL_*`` variables).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from phasegraph.actions import ActionContext, ActionResult, CallNext
from phasegraph.events import Event, ends_run
from phasegraph.model import replace

__all__ = ["Tracing", "otlp_provider"]

_SCOPE: Final = "phasegraph"
_NODE_ENDS: Final = frozenset({"node_completed", "node_failed", "node_skipped", "node_cancelled"})
_DRIVE_ENDS: Final = frozenset({"run_waiting", "run_parked"})
"""Run events after which this process stops driving the run (it is not over)."""
_MAX_OPEN: Final = 4096
"""Runs whose spans stay open at most: a drive cut off (lease lost) sends no end event."""


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

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self._runs: dict[str, _Open] = {}

    # -- the bus: runs and nodes ------------------------------------------------------

    def listen(self, event: Event) -> None:
        """Open and close run and node spans from a committed event."""
        if event.live:
            return
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

    def _run(self, run_id: str) -> _Open:
        opened = self._runs.get(run_id)
        if opened is None:
            span = self._tracer.start_span(
                "phasegraph.run", context=None, attributes={"phasegraph.run.id": run_id}
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
                "phasegraph.node",
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
            "phasegraph.step", context=trace.set_span_in_context(node), attributes=attributes
        ) as step:
            result = await call_next(replace(ctx, tool=_ToolTracer(self._tracer, ctx)))
            step.set_attribute("phasegraph.trigger", result.trigger)
            self._model_call(step, result.output, started)
        return result

    def _model_call(self, step: trace.Span, output: Mapping[str, Any], started: int) -> None:
        """The ``llm:`` step's model call, from its output (seen only once it answered)."""
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
        span = self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(step),
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            start_time=started,
        )
        span.end()


class _ToolTracer:
    """``ctx.tool`` with a span per call, named by the model's call id when it has one.

    The call id is not passed to ``ctx.tool``: the ``tools:`` action answers the calls of
    the conversation's last assistant message in order, so the first pending call of the
    same name is this one.
    """

    __slots__ = ("_ctx", "_pending", "_tracer")

    def __init__(self, tracer: trace.Tracer, ctx: ActionContext) -> None:
        self._tracer, self._ctx = tracer, ctx
        self._pending: list[tuple[str, str]] | None = None

    async def __call__(self, name: str, /, **arguments: Any) -> Mapping[str, Any]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        call_id = self._call_id(name)
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        with self._tracer.start_as_current_span(
            f"execute_tool {name}", attributes=attributes
        ) as span:
            result = await self._ctx.tool(name, **arguments)
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
    provider = TracerProvider(resource=resource)  # shuts down (and flushes) at exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
