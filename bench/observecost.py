"""What metrics and traces cost, in a loop, without I/O: the work ``relay_api.middleware.Observe``
and the accept/status histograms add to one request, and the work the consumer's metrics and
its per-message trace add to one message (a request id, a trace, counters and histograms, the
log filter). Measured as process CPU per operation against the same loop without it.
``python -m bench.observecost [N]``; ``make bench`` runs it as its ``overhead`` scenario."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

from prometheus_client import generate_latest

from queue_consumer import metrics as consumer_metrics
from relay_api import metrics as api_metrics
from relay_api.middleware import Observe
from relay_core import tracing
from relay_core.metrics import EXECUTOR_SECONDS
from relay_core.queue import TransactionMessage, trace_attributes

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TX_ID = "3f1c1b1e-2d7a-4d4e-9f0a-0c1d2e3f4a5b"


class _Route:
    path = "/api/v1/relay/direct"


async def _endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
    scope["route"] = _Route  # as Starlette's router leaves it
    await send({"type": "http.response.start", "status": 202, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _sink(message: Any) -> None:
    return None


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b""}


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/relay/direct",
        "headers": [(b"content-type", b"application/json"), (b"x-api-key", b"k" * 40)],
    }


async def _requests(n: int, observed: bool) -> float:
    app: Any = Observe(_endpoint) if observed else _endpoint
    started = time.process_time()
    for _ in range(n):
        await app(_scope(), _receive, _sink)
        if observed:  # what the submit endpoint and the accept path add
            api_metrics.ACCEPT_SECONDS.observe("direct", "accepted", 0.004)
            api_metrics.ACCEPTED.inc("direct", "normal")
            TransactionMessage.new(TX_ID, "direct", tracing.current()).attributes()
        else:
            TransactionMessage.new(TX_ID, "direct").attributes()
    return (time.process_time() - started) / n * 1e6


def _messages(n: int, observed: bool) -> float:
    message = {"MessageAttributes": TransactionMessage.new(TX_ID, "direct").attributes()}
    message["MessageAttributes"]["requestId"] = {"DataType": "String", "StringValue": "req-1"}
    message["MessageAttributes"]["traceparent"] = {"DataType": "String", "StringValue": PARENT}
    record_filter = tracing.TraceLogFilter()
    record = logging.makeLogRecord({"msg": "consumer.message.handled"})  # written anyway
    started = time.process_time()
    for _ in range(n):
        if not observed:
            continue
        request_id, traceparent = trace_attributes(message)
        token = tracing.activate(tracing.begin(request_id, traceparent))
        consumer_metrics.RECEIVED.inc("normal")
        EXECUTOR_SECONDS.observe("submit", "ok", 0.2)
        consumer_metrics.CLAIM_LAG.observe("normal", 0.05)
        consumer_metrics.PROCESSED.inc("normal", "submitted", "delete")
        consumer_metrics.MESSAGE_SECONDS.observe("normal", 0.21)
        record_filter.filter(record)
        tracing.deactivate(token)
    return (time.process_time() - started) / n * 1e6


def measure(n: int = 100_000) -> dict[str, float]:
    """CPU µs per request and per message, with and without metrics and traces."""
    plain = min(asyncio.run(_requests(n, False)) for _ in range(3))
    observed = min(asyncio.run(_requests(n, True)) for _ in range(3))
    message = min(_messages(n, True) - _messages(n, False) for _ in range(3))
    size = len(generate_latest())  # the first one also pays for one-time set-up
    scrapes = []
    for _ in range(5):
        scrape_started = time.process_time()
        generate_latest()
        scrapes.append(time.process_time() - scrape_started)
    scrape_ms = min(scrapes) * 1e3
    return {
        "requests": n,
        "request_plain_us": round(plain, 2),
        "request_observed_us": round(observed, 2),
        "request_overhead_us": round(observed - plain, 2),
        "message_overhead_us": round(message, 2),
        "scrape_ms": round(scrape_ms, 2),
        "scrape_bytes": size,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    found = measure(n)
    sys.stdout.write(
        f"metrics + traces per request: {found['request_overhead_us']:.1f} µs of CPU "
        f"({found['request_plain_us']:.1f} -> {found['request_observed_us']:.1f} µs for a bare "
        f"ASGI request); per message: {found['message_overhead_us']:.1f} µs; one scrape: "
        f"{found['scrape_ms']:.1f} ms for {found['scrape_bytes']:,} bytes ({n:,} operations)\n"
    )


if __name__ == "__main__":
    main()
