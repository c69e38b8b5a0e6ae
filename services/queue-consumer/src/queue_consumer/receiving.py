"""What a poller does next: receive from its lane now, or wait (and for what).

One pure decision per turn of a poller's loop, so that the rules that decide whether work
is received (the operator's switch, the executor circuit, the lanes) live in one place and
can be checked as a state machine (tests/test_receiving_liveness.py)."""

from __future__ import annotations

from dataclasses import dataclass

from queue_consumer.circuit import CircuitBreaker, CircuitState
from queue_consumer.lanes import Lane


@dataclass(frozen=True, slots=True)
class Receive:
    """Ask SQS for up to ``count`` messages now; ``ticket``: they carry the half-open probe."""

    count: int
    ticket: int | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """Receive nothing until ``until`` (a time on the circuit's clock), or, when asked, until
    the circuit changes or the lane is switched on again."""

    reason: str
    until: float | None = None
    circuit_change: bool = False
    switch: bool = False


def decide(lane: Lane, breaker: CircuitBreaker, now: float) -> Receive | Wait:
    if not lane.receiving.is_set():  # paused by an operator: receive nothing
        return Wait("paused", switch=True)
    # While the executor circuit is open nothing is received (messages keep their receive
    # counts); half-open, one message at a time carries the probe. The probe is the normal
    # pollers' to carry: a fast poller holding it through a long poll of an empty fast queue
    # would keep the circuit from ever closing.
    state = breaker.state
    if lane.urgent and state is not CircuitState.closed:
        return Wait("the fast lane waits for the circuit", until=now + 0.2)
    if state is CircuitState.closed:
        return Receive(10)
    ticket = breaker.take_ticket()
    if ticket is not None:
        return Receive(1, ticket)
    if state is CircuitState.open:
        return Wait("circuit open", until=breaker.reopens_at, circuit_change=True)
    return Wait("the probe is in flight", circuit_change=True)


def probe_due(breaker: CircuitBreaker) -> bool:
    """Whether the consumer should probe the executor itself now: never (a probe rides on a
    received message)."""
    return False
