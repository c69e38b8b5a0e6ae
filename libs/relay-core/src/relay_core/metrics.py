"""Prometheus metrics shared by the services, and the small helpers that keep them cheap.

Names follow the Prometheus conventions: ``relay_`` then the component, base units
(``_seconds``), ``_total`` for counters. A labelled child is looked up once per label tuple and
kept: ``labels()`` takes a lock and builds a key on every call, which on the hot path costs
more than the observation itself (``bench/observecost.py``).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

# Latencies from a millisecond to half a minute: cache reads at the bottom, a slow executor
# or a long poll at the top.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Labelled:
    """A labelled counter or histogram whose children are created once and reused."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, *labels: str) -> Any:
        found = self._children.get(labels)
        if found is None:
            found = self._children[labels] = self.metric.labels(*labels)
        return found

    def observe(self, *labels_then_value: Any) -> None:
        *labels, value = labels_then_value
        self.child(*labels).observe(value)

    def inc(self, *labels: str, amount: float = 1) -> None:
        self.child(*labels).inc(amount)


def histogram(name: str, documentation: str, labels: list[str]) -> Labelled:
    return Labelled(Histogram(name, documentation, labels, buckets=LATENCY_BUCKETS))


def counter(name: str, documentation: str, labels: list[str]) -> Labelled:
    return Labelled(Counter(name, documentation, labels))


EXECUTOR_SECONDS = histogram(
    "relay_executor_request_duration_seconds",
    "Requests to the executor (the OpenZeppelin Relayer) by operation and result "
    "(ok or the error kind: timeout, connection, server_error, rate_limited, rejected, "
    "refused, not_found)",
    ["operation", "result"],
)
