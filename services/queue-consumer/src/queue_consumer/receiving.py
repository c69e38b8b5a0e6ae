"""What a poller does next: receive from its lane now, or wait (and for what).

One decision per turn of a poller's loop, so that the rules that decide whether work is
received live in one place and can be checked as a state machine
(tests/test_receiving_liveness.py; the liveness argument is in ``circuit.py``):

* a lane an operator paused receives nothing until it is switched on again;
* while a circuit (the executor's, the database's) is not closed, no lane receives: messages
  wait in SQS without spending receive counts. Whatever lane holds the work, the circuit is
  probed by the consumer itself (``probe_due``), so no lane waits on another lane's traffic;
* otherwise every lane receives, the fast one before the normal one for room
  (``lanes.Capacity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from queue_consumer.circuit import CircuitBreaker, CircuitState
from queue_consumer.lanes import Lane


@dataclass(frozen=True, slots=True)
class Receive:
    """Ask SQS for up to ``count`` messages now."""

    count: int


@dataclass(frozen=True, slots=True)
class Wait:
    """Receive nothing until ``until`` (a time on the circuit's clock), or, when asked, until
    ``circuit`` changes or the lane is switched on again."""

    reason: str
    until: float | None = None
    circuit: CircuitBreaker | None = None
    switch: bool = False


def decide(lane: Lane, circuits: Sequence[CircuitBreaker]) -> Receive | Wait:
    if not lane.receiving.is_set():  # paused by an operator: receive nothing
        return Wait("paused", switch=True)
    for circuit in circuits:
        state = circuit.state
        if state is CircuitState.open:
            return Wait(f"{circuit.name} circuit open", until=circuit.reopens_at, circuit=circuit)
        if state is CircuitState.half_open:
            return Wait(f"{circuit.name} circuit probing", circuit=circuit)
    return Receive(10)


def probe_due(circuit: CircuitBreaker) -> bool:
    """Whether the consumer should probe ``circuit`` itself now: it is half-open and no call
    (the prober's, or a message's that reached it first) is testing it."""
    return circuit.probe_due()
