"""Prometheus metrics for relay-api, served at GET /metrics."""

from __future__ import annotations

from prometheus_client import Counter

ACCEPTED = Counter("relay_api_accepted_total", "Transactions accepted (202)", ["type"])
REPLAYED = Counter("relay_api_idempotent_replays_total", "Idempotent replays answered")
OUTBOX_SEND_FAILURES = Counter(
    "relay_api_outbox_send_failures_total", "Messages whose direct SQS send failed"
)
OUTBOX_DEFERRED = Counter(
    "relay_api_outbox_deferred_total", "Messages left to the sweeper because the buffer was full"
)
OUTBOX_SWEPT = Counter("relay_api_outbox_swept_total", "Messages sent by the sweeper")
STATUS_READS = Counter("relay_api_status_reads_total", "Status reads by tier", ["tier"])
