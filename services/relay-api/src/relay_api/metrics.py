"""Prometheus metrics for relay-api, served at GET /metrics (shared ones: relay_core.metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from relay_core.metrics import counter, histogram

REQUEST_SECONDS = histogram(
    "relay_api_request_duration_seconds",
    "HTTP requests by method, route template and status (its _count is the request count)",
    ["method", "route", "status"],
)
ACCEPT_SECONDS = histogram(
    "relay_api_accept_duration_seconds",
    "Accepted submissions, from a validated body to the committed row, by type and outcome "
    "(accepted or replayed)",
    ["type", "outcome"],
)
STATUS_SECONDS = histogram(
    "relay_api_status_read_duration_seconds",
    "Status reads by the tier that answered: hit (Redis), miss (MySQL) or upstream (executor)",
    ["tier"],
)
ACCEPTED = counter("relay_api_accepted_total", "Transactions accepted (202)", ["type", "lane"])
REPLAYED = Counter("relay_api_idempotent_replays_total", "Idempotent replays answered")
OUTBOX_SEND_FAILURES = Counter(
    "relay_api_outbox_send_failures_total", "Messages whose direct SQS send failed"
)
OUTBOX_DEFERRED = Counter(
    "relay_api_outbox_deferred_total", "Messages left to the sweeper because the buffer was full"
)
OUTBOX_SWEPT = Counter("relay_api_outbox_swept_total", "Messages sent by the sweeper")
OUTBOX_BACKLOG = Gauge(
    "relay_api_outbox_backlog", "Committed transactions this process has still to send to SQS"
)
OUTBOX_OLDEST_AGE = Gauge(
    "relay_api_outbox_oldest_age_seconds",
    "How long the oldest transaction this process has still to send has waited (0: none)",
)
