"""Prometheus metrics of the consumer, served at GET /metrics on RELAY_CONSUMER_HEALTH_PORT
(with the executor's request histogram from relay_core.metrics)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from relay_core.metrics import counter, histogram

RECEIVED = counter("relay_consumer_messages_received_total", "SQS messages received", ["lane"])
PROCESSED = counter(
    "relay_consumer_messages_processed_total",
    "Messages handled, by lane, outcome (what the consumer did: submitted, adopted, retry, "
    "circuit_open, poison, ...) and what became of the message (delete, backoff, requeue, "
    "dead_letter)",
    ["lane", "outcome", "plan"],
)
FAILED = counter(
    "relay_consumer_messages_failed_total",
    "Messages whose attempt failed, by lane and kind (transient, permanent, exhausted, poison, "
    "error)",
    ["lane", "kind"],
)
MESSAGE_SECONDS = histogram(
    "relay_consumer_message_duration_seconds",
    "From receiving a message to deciding what becomes of it, by lane",
    ["lane"],
)
CLAIM_LAG = histogram(
    "relay_consumer_claim_lag_seconds",
    "From the accepted row's commit to its first claim by a consumer, by lane",
    ["lane"],
)
CLAIM_CONFLICTS = counter(
    "relay_consumer_claim_conflicts_total",
    "Compare-and-set writes lost to a concurrent writer (lost), or executor records adopted by "
    "another row first (adoption)",
    ["kind"],
)
IN_DOUBT = counter(
    "relay_consumer_in_doubt_resolutions_total",
    "Attempts whose answer was lost, by how they were settled: adopted (the executor had it), "
    "resubmitted (it had not), expired, lookup_incomplete (try again later), failed",
    ["result"],
)
NOTIFICATIONS = counter(
    "relay_consumer_notifications_total",
    "Callback deliveries by result: delivered, failed (retried later), abandoned",
    ["result"],
)
IN_FLIGHT = Gauge("relay_consumer_in_flight", "Messages this consumer is working on")
CIRCUIT_STATE = Gauge(
    "relay_consumer_circuit_state",
    "The executor circuit: 1 for the state it is in (closed, open, half_open), else 0",
    ["state"],
)
CIRCUIT_OPENS = Counter(
    "relay_consumer_circuit_opens_total", "How many times the executor circuit opened"
)
LANE_RECEIVING = Gauge(
    "relay_consumer_lane_receiving",
    "1 while the lane is received from, 0 while an operator has it paused",
    ["lane"],
)


def watch(in_flight: Callable[[], int], circuit: Callable[[], str]) -> None:
    """Gauges read at scrape time, from the consumer's own state: nothing per message."""
    IN_FLIGHT.set_function(in_flight)
    for state in ("closed", "open", "half_open"):
        CIRCUIT_STATE.labels(state).set_function(functools.partial(_is, circuit, state))


def _is(current: Callable[[], str], state: str) -> float:
    return float(current() == state)


RELAYER_STATE = Gauge(
    "relay_consumer_relayer_state",
    "Each relayer of the pool: 1 for the state it is in (ok, paused, open, jammed, low), else 0",
    ["relayer", "state"],
)
RELAYER_IN_FLIGHT = Gauge(
    "relay_consumer_relayer_in_flight",
    "Each relayer's submitted transactions (as last counted, plus those sent since)",
    ["relayer"],
)
RELAYER_BALANCE = Gauge(
    "relay_consumer_relayer_balance_wei", "Each relayer's balance as last read", ["relayer"]
)
RELAYER_TROUBLE = counter(
    "relay_consumer_relayer_trouble_total",
    "How often a relayer was found jammed, low or paused (it takes no new work meanwhile)",
    ["relayer", "state"],
)


def watch_pool(pool: Any) -> None:
    """The pool's gauges, read at scrape time from the members (queue_consumer.pool)."""
    for name, member in pool.members.items():
        for state in ("ok", "paused", "open", "jammed", "low"):
            RELAYER_STATE.labels(name, state).set_function(
                functools.partial(_is, functools.partial(_state, member), state)
            )
        RELAYER_IN_FLIGHT.labels(name).set_function(member.load)
        RELAYER_BALANCE.labels(name).set_function(functools.partial(_balance, member))


def _state(member: Any) -> str:
    return str(member.state.value)


def _balance(member: Any) -> float:
    return float("nan") if member.balance_wei is None else float(member.balance_wei)
