"""Request ids and W3C trace context, carried across the services in logs and messages.

The API gives every request a :class:`Trace`: the client's ``X-Request-Id`` when it is
well-formed (else a new one) and the client's ``traceparent`` when it is valid (else a new
trace). The trace rides with the transaction in the SQS message's attributes; the consumer
continues it for each message and sends it to the executor (``x-request-id``,
``traceparent``). Every log line written under a trace carries ``requestId`` and ``traceId``,
so one transaction can be followed across the services with a grep.

A :class:`Trace` lives in a context variable: each request and each message runs in its own
asyncio task, whose context is its own.

OpenTelemetry: when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the SDK is installed
(``relay-core[otel]``), :func:`configure_export` makes every :func:`begin` also a span
exported over OTLP/HTTP, with the ids the logs show. When it is not set, nothing is imported
and nothing is exported.
"""

from __future__ import annotations

import logging
import os
import re
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

from relay_core import ids

log = logging.getLogger(__name__)

# Printable, no spaces, at most 128 characters: safe in a header, a log line and an SQS
# attribute. Anything else from a client is replaced by a fresh id, never echoed.
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")
# version-traceid-parentid-flags, lowercase hex (W3C Trace Context, level 1).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


_new_id = ids.hex_id


@dataclass(frozen=True, slots=True)
class Trace:
    request_id: str
    trace_id: str  # 32 hex digits
    span_id: str  # this service's span: the parent of whatever it calls
    sampled: bool = True
    span: Any = field(default=None, compare=False, repr=False)  # the OpenTelemetry span, if any

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def request_id_ok(value: str) -> bool:
    return _REQUEST_ID.fullmatch(value) is not None


def parse_traceparent(value: str | None) -> tuple[str, str, bool] | None:
    """(trace id, parent span id, sampled) from a valid ``traceparent``, else None. Version
    ff is invalid; a higher version is read as 00 (the spec's forward-compatibility rule)."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(value.strip()) != 55):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id, bool(int(flags, 16) & 1)


def begin(
    request_id: str | None = None,
    traceparent: str | None = None,
    *,
    name: str = "relay",
    kind: str = "internal",
) -> Trace:
    """A new span of work: in the trace ``traceparent`` names (else a new trace), under the
    given request id when it is well-formed (else the trace id). End it with :func:`finish`."""
    parent = parse_traceparent(traceparent)
    span = None
    if _export is not None:
        span = _export.start(name, kind, parent)
        trace_id, span_id, sampled = _export.ids(span)
    elif parent is None:
        trace_id, span_id, sampled = _new_id(16), _new_id(8), True
    else:
        trace_id, span_id, sampled = parent[0], _new_id(8), parent[2]
    if request_id is None or not request_id_ok(request_id):
        request_id = trace_id
    return Trace(request_id, trace_id, span_id, sampled, span)


def child(trace: Trace, name: str, kind: str = "client") -> Trace:
    """A span under ``trace`` for a call it makes (exported only when export is on; without
    it, the call simply carries ``trace``'s own span as its parent)."""
    if _export is None:
        return trace
    span = _export.start(name, kind, (trace.trace_id, trace.span_id, trace.sampled))
    _, span_id, _ = _export.ids(span)
    return Trace(trace.request_id, trace.trace_id, span_id, trace.sampled, span)


def finish(
    trace: Trace, *, error: str | None = None, attributes: dict[str, str | int] | None = None
) -> None:
    """End ``trace``'s exported span (nothing to do when export is off)."""
    if trace.span is not None and _export is not None:
        _export.end(trace.span, error, attributes or {})


_current: ContextVar[Trace | None] = ContextVar("relay_trace", default=None)


def current() -> Trace | None:
    return _current.get()


def activate(trace: Trace) -> Token[Trace | None]:
    return _current.set(trace)


def deactivate(token: Token[Trace | None]) -> None:
    _current.reset(token)


class TraceLogFilter(logging.Filter):
    """Adds ``requestId`` and ``traceId`` to every record written under a trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        trace = _current.get()
        if trace is not None:
            record.requestId = trace.request_id
            record.traceId = trace.trace_id
        return True


# --- OpenTelemetry export ----------------------------------------------------------------


class _Export:
    """The OpenTelemetry SDK behind :func:`begin`: imported only when an endpoint is set."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry import trace as ot
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._ot = ot
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        # The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (and _HEADERS, _TIMEOUT) itself.
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self.provider.get_tracer("relay")
        self._kinds = {
            "server": ot.SpanKind.SERVER,
            "client": ot.SpanKind.CLIENT,
            "consumer": ot.SpanKind.CONSUMER,
            "producer": ot.SpanKind.PRODUCER,
            "internal": ot.SpanKind.INTERNAL,
        }

    def start(self, name: str, kind: str, parent: tuple[str, str, bool] | None) -> Any:
        ot = self._ot
        context = None
        if parent is not None:
            remote = ot.SpanContext(
                trace_id=int(parent[0], 16),
                span_id=int(parent[1], 16),
                is_remote=True,
                trace_flags=ot.TraceFlags(0x01 if parent[2] else 0x00),
            )
            context = ot.set_span_in_context(ot.NonRecordingSpan(remote))
        return self._tracer.start_span(name, context=context, kind=self._kinds[kind])

    @staticmethod
    def ids(span: Any) -> tuple[str, str, bool]:
        context = span.get_span_context()
        return (
            f"{context.trace_id:032x}",
            f"{context.span_id:016x}",
            bool(context.trace_flags & 0x01),
        )

    def end(self, span: Any, error: str | None, attributes: dict[str, str | int]) -> None:
        for key, value in attributes.items():
            span.set_attribute(key, value)
        if error is not None:
            span.set_status(self._ot.Status(self._ot.StatusCode.ERROR, error))
        span.end()


_export: _Export | None = None


def configure_export(service_name: str) -> bool:
    """Export spans over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its traces variant) is
    set. Returns whether export is on; says why not when an endpoint is set but the SDK is
    missing."""
    global _export
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return False
    try:
        _export = _Export(os.environ.get("OTEL_SERVICE_NAME") or service_name)
    except ImportError as exc:
        log.error(
            "tracing.export_unavailable",
            extra={
                "endpoint": endpoint,
                "error": f"{exc}: install relay-core[otel] (opentelemetry-sdk and "
                "opentelemetry-exporter-otlp-proto-http)",
            },
        )
        return False
    log.info("tracing.export_on", extra={"endpoint": endpoint, "service": service_name})
    return True


def shutdown_export() -> None:
    """Flush and stop the exporter (at process exit)."""
    global _export
    if _export is not None:
        _export.provider.shutdown()
        _export = None
