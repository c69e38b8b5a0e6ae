"""What an operator follows a request by: its id on every response, its trace carried into
the SQS message, its latency in /metrics by route and status, and (when an OTLP endpoint is
set) its span exported."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, receive_all
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import REGISTRY

from relay_api.app import create_app
from relay_api.settings import ApiSettings
from relay_core import jsonutil, tracing

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{PARENT_TRACE}-00f067aa0ba902b7-01"


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_every_response_carries_a_request_id_kept_from_the_client_when_well_formed(
    client: httpx.AsyncClient, api_key: str
) -> None:
    generated = await client.get("/health")
    assert re.fullmatch(r"[0-9a-f]{32}", generated.headers["x-request-id"])
    kept = await client.get("/health", headers={"X-Request-Id": "checkout-7f3a"})
    assert kept.headers["x-request-id"] == "checkout-7f3a"
    replaced = await client.get("/health", headers={"X-Request-Id": "bad id; drop table"})
    assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"])
    # errors too: refused key, unknown route, body too large
    assert "x-request-id" in (await client.get("/api/v1/relay/transactions")).headers
    assert "x-request-id" in (await client.get("/no/such/route")).headers
    big = await client.post(
        "/api/v1/relay/direct",
        content=b"{" + b" " * 2_000_000 + b"}",
        headers={"X-API-Key": api_key, "Content-Type": "application/json"},
    )
    assert big.status_code == 413
    assert "x-request-id" in big.headers


async def test_the_sqs_message_carries_the_request_id_and_continues_the_callers_trace(
    client: httpx.AsyncClient, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    response = await client.post(
        "/api/v1/relay/direct",
        json={"to": DEAD},
        headers={"X-API-Key": api_key, "X-Request-Id": "order-1001", "traceparent": PARENT},
    )
    assert response.status_code == 202
    assert response.headers["x-request-id"] == "order-1001"
    [message] = await receive_all(sqs, queues[0])
    attributes = message["MessageAttributes"]
    assert attributes["requestId"]["StringValue"] == "order-1001"
    parsed = tracing.parse_traceparent(attributes["traceparent"]["StringValue"])
    assert parsed is not None
    assert parsed[0] == PARENT_TRACE  # the caller's trace, continued
    assert parsed[1] != "00f067aa0ba902b7"  # under the API's own span
    assert jsonutil.loads(message["Body"])["transactionId"] == response.json()["transactionId"]


async def test_metrics_count_requests_by_route_template_and_status(
    client: httpx.AsyncClient, api_key: str
) -> None:
    route = "/api/v1/relay/status/{transactionId}"
    before = {
        "accepted": _sample(
            "relay_api_request_duration_seconds_count",
            method="POST",
            route="/api/v1/relay/direct",
            status="202",
        ),
        "not_found": _sample(
            "relay_api_request_duration_seconds_count", method="GET", route=route, status="404"
        ),
        "unmatched": _sample(
            "relay_api_request_duration_seconds_count",
            method="GET",
            route="unmatched",
            status="404",
        ),
        "accept": _sample(
            "relay_api_accept_duration_seconds_count", type="direct", outcome="accepted"
        ),
        "miss": _sample("relay_api_status_read_duration_seconds_count", tier="miss"),
    }
    headers = {"X-API-Key": api_key}
    accepted = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    tx_id = accepted.json()["transactionId"]
    await client.get(f"/api/v1/relay/status/{tx_id}", headers=headers)  # Redis is cold
    for _ in range(3):
        await client.get(
            "/api/v1/relay/status/00000000-0000-4000-8000-000000000000", headers=headers
        )
    await client.get("/no/such/route")
    assert (
        _sample(
            "relay_api_request_duration_seconds_count",
            method="POST",
            route="/api/v1/relay/direct",
            status="202",
        )
        - before["accepted"]
        == 1
    )
    assert (
        _sample("relay_api_request_duration_seconds_count", method="GET", route=route, status="404")
        - before["not_found"]
        == 3
    )
    assert (
        _sample(
            "relay_api_request_duration_seconds_count",
            method="GET",
            route="unmatched",
            status="404",
        )
        - before["unmatched"]
        == 1
    )
    assert (
        _sample("relay_api_accept_duration_seconds_count", type="direct", outcome="accepted")
        - before["accept"]
        == 1
    )
    assert (
        _sample("relay_api_status_read_duration_seconds_count", tier="miss") - before["miss"] == 1
    )
    text = (await client.get("/metrics")).text
    assert "relay_api_outbox_backlog " in text
    assert "relay_api_outbox_oldest_age_seconds " in text
    assert "/api/v1/relay/status/00000000" not in text  # raw paths never become labels


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint on loopback, in its own thread (the exporter posts from a
    thread of its own and blocks the app's shutdown until it is answered)."""

    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(request)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _spans(requests: list[ExportTraceServiceRequest]) -> list[Any]:
    return [
        span
        for request in requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


@pytest.fixture
def collector() -> Iterator[tuple[list[ExportTraceServiceRequest], str]]:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_spans_are_exported_over_otlp_when_an_endpoint_is_set(
    api_settings: ApiSettings,
    queues: tuple[str, str],
    collector: tuple[list[ExportTraceServiceRequest], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received, endpoint = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    app = create_app(api_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as api:
            answer = await api.get("/health", headers={"traceparent": PARENT})
    # Leaving the lifespan flushed the exporter.
    [span] = [s for s in _spans(received) if s.name == "GET /health"]
    assert span.trace_id.hex() == PARENT_TRACE
    assert span.parent_span_id.hex() == "00f067aa0ba902b7"
    assert answer.headers["x-request-id"] == PARENT_TRACE
    assert tracing._export is None  # stopped with the app


async def test_nothing_is_exported_without_an_endpoint(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert tracing._export is None
    assert (await client.get("/health")).status_code == 200
