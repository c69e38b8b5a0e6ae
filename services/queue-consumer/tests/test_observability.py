"""A consumer process as an operator watches it: Prometheus metrics on its own port, and the
accepting request's id and trace on the log lines of the messages it handles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from consumer_testkit import seed_rows, send_messages, status_counts, wait_until
from prometheus_client.parser import text_string_to_metric_families

from relay_core import tracing
from relay_devstack.localsqs import free_port

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_a_consumer_serves_its_metrics_and_logs_each_message_under_its_request(
    database_url: str, sqs: Any, queues: tuple[str, str], spawn_consumer: Any, tmp_path: Path
) -> None:
    port = free_port()
    spawn_consumer(consumer_health_port=port)
    ids = seed_rows(database_url, 6)
    trace = tracing.begin("order-77", PARENT)
    await send_messages(sqs, queues[0], ids[:4], trace=trace)
    await send_messages(sqs, queues[0], ids[4:])  # accepted before traces existed: no ids
    await wait_until(
        lambda: status_counts(database_url).get("pending", 0) == 0, 60, "all six submitted"
    )

    async def scraped() -> dict[Any, float]:
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
        assert answer.headers["content-type"].startswith("text/plain")
        return _samples(answer.text)

    async def all_counted() -> bool:
        samples = await scraped()
        done = _value(
            samples,
            "relay_consumer_messages_processed_total",
            lane="normal",
            outcome="submitted",
            plan="delete",
        )
        return done == 6

    await wait_until(all_counted, 20, "six messages counted as submitted")
    samples = await scraped()
    assert _value(samples, "relay_consumer_messages_received_total", lane="normal") == 6
    assert (
        _value(
            samples,
            "relay_executor_request_duration_seconds_count",
            operation="submit",
            result="ok",
        )
        == 6
    )
    assert _value(samples, "relay_consumer_claim_lag_seconds_count", lane="normal") == 6
    assert _value(samples, "relay_consumer_circuit_state", state="closed") == 1
    assert _value(samples, "relay_consumer_circuit_state", state="open") == 0
    assert ("relay_consumer_in_flight", frozenset()) in samples
    assert _value(samples, "relay_consumer_lane_receiving", lane="normal") == 1
    async with httpx.AsyncClient() as http:
        health = await http.get(f"http://127.0.0.1:{port}/health")
    assert health.json()["status"] == "ok"

    lines = [
        json.loads(line)
        for line in (tmp_path / "consumer-0.log").read_text().splitlines()
        if line.startswith("{")
    ]
    # the heartbeat line infra/'s metric filters and alarms read (tests/deploy/test_infra.py)
    [beat, *_] = [line for line in lines if line["event"] == "consumer.heartbeat"]
    assert beat["circuit"] == "closed"
    assert isinstance(beat["inFlight"], int)
    handled = [line for line in lines if line["event"] == "consumer.message.handled"]
    traced = {line["transactionId"] for line in handled if line.get("requestId") == "order-77"}
    assert traced == set(ids[:4])
    assert {line["traceId"] for line in handled if line.get("requestId") == "order-77"} == {
        trace.trace_id
    }
    untraced = [line for line in handled if line["transactionId"] in ids[4:]]
    assert len(untraced) == 2
    # without ids from the message, each message still gets a trace of its own to log under
    assert all(line["requestId"] == line["traceId"] for line in untraced)
