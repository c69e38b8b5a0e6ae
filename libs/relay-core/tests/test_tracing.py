"""Request ids and trace context (relay_core.tracing): what a client sends is kept only when
well-formed, a trace is continued from a valid traceparent, every log line under a trace says
which, and the executor is told."""

from __future__ import annotations

import json
import logging

from relay_core import tracing
from relay_core.logs import JsonFormatter
from relay_core.queue import TransactionMessage, trace_attributes

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_well_formed_request_id_is_kept_and_anything_else_replaced() -> None:
    assert tracing.begin("order-42:retry.1").request_id == "order-42:retry.1"
    for bad in ("", " spaced id", "a" * 129, "new\nline", "ünïcode", "-leading-dash"):
        trace = tracing.begin(bad)
        assert trace.request_id == trace.trace_id, bad
    assert len(tracing.begin().trace_id) == 32
    assert len(tracing.begin().span_id) == 16


def test_a_valid_traceparent_is_continued_and_an_invalid_one_starts_a_new_trace() -> None:
    trace = tracing.begin(None, PARENT)
    assert trace.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace.span_id != "00f067aa0ba902b7"  # a span of its own under the caller's
    assert trace.traceparent == f"00-{trace.trace_id}-{trace.span_id}-01"
    assert tracing.begin(None, PARENT[:-2] + "00").traceparent.endswith("-00")  # not sampled
    for bad in (
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        PARENT + "-extra",  # version 00 has exactly four fields
        "garbage",
    ):
        assert tracing.begin(None, bad).trace_id != "4bf92f3577b34da6a3ce929d0e0e4736", bad
    # A later version may carry more fields; its first four are read.
    assert tracing.parse_traceparent("01" + PARENT[2:] + "-what-next") is not None


def test_log_lines_under_a_trace_carry_its_ids() -> None:
    record = logging.makeLogRecord({"msg": "consumer.message.handled"})
    tracing.TraceLogFilter().filter(record)
    assert "requestId" not in json.loads(JsonFormatter().format(record))
    trace = tracing.begin("req-1", PARENT)
    token = tracing.activate(trace)
    try:
        record = logging.makeLogRecord({"msg": "consumer.message.handled"})
        tracing.TraceLogFilter().filter(record)
    finally:
        tracing.deactivate(token)
    line = json.loads(JsonFormatter().format(record))
    assert line["requestId"] == "req-1"
    assert line["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_message_carries_the_request_and_its_trace() -> None:
    trace = tracing.begin("req-7", PARENT)
    message = TransactionMessage.new("3f1c1b1e-2d7a-4d4e-9f0a-0c1d2e3f4a5b", "direct", trace)
    received = {"MessageAttributes": message.attributes()}
    assert trace_attributes(received) == ("req-7", trace.traceparent)
    bare = TransactionMessage.new("3f1c1b1e-2d7a-4d4e-9f0a-0c1d2e3f4a5b", "direct")
    assert trace_attributes({"MessageAttributes": bare.attributes()}) == (None, None)
    assert trace_attributes({}) == (None, None)
