"""A real OTLP/HTTP trace receiver on a loopback port: what an exporter sent, decoded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from http_kit import served


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids in hex, attributes as plain values."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    start: int
    parent_id: str
    attributes: Mapping[str, Any]
    events: tuple[tuple[str, Mapping[str, Any]], ...]
    status_code: int
    service: str


@dataclass
class Receiver:
    """``POST /v1/traces`` on ``url``; :attr:`spans` holds every span received."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0

    async def traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.requests += 1
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(
                    ReceivedSpan(
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        start=span.start_time_unix_nano,
                        parent_id=span.parent_span_id.hex(),
                        attributes=_attributes(span.attributes),
                        events=tuple((e.name, _attributes(e.attributes)) for e in span.events),
                        status_code=span.status.code,
                        service=str(resource.get("service.name", "")),
                    )
                    for span in scope_spans.spans
                )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def named(self, name: str) -> list[ReceivedSpan]:
        """The spans called ``name``, in the order received."""
        return [span for span in self.spans if span.name == name]

    def by_id(self, span_id: str) -> ReceivedSpan:
        """The span with this id."""
        return next(span for span in self.spans if span.span_id == span_id)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    """Start a receiver on a free loopback port; stop it on exit."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    async with served(app, access_log=None) as receiver.url:
        yield receiver
