"""Protecting what the consumer depends on: an in-flight limit and circuit breakers.

The **in-flight limit** caps this process's concurrent executor calls (OpenZeppelin Relayer
serves at most ``RELAYER_CONCURRENCY_LIMIT``, 100 by default, and answers 429 beyond it), so
the consumer does not provoke the 429s it would then have to absorb. Every executor call of the
process takes a slot: submits, in-doubt lookups, the tracker's reads and the probe.

A **circuit breaker** stops the consumer from working against a dependency that is down: one
for the executor, one for the database. The executor's counts consecutive failures that say
"the executor cannot serve now" (connection refused or dropped, timeouts, 5xx, 429, 401/403)
on the message path (submits and in-doubt lookups; the tracker's reads neither count nor pass
while it is open); the database's counts messages that failed because the database did not
answer.

* ``closed``: calls pass and every unpaused lane is received. ``failure_threshold`` such
  failures in a row open it.
* ``open``: no call passes and no lane is received, so messages wait in SQS without spending
  receive counts; a message already received that finds it open is put back for as long as the
  circuit has left (``retry_in``), not for its own back-off. After a cooldown (doubling per
  failed probe up to a cap, and never shorter than a 429's ``retry-after``, honoured up to
  ``RETRY_AFTER_CAP_S``) it becomes half-open.
* ``half_open``: one call at a time (the probe) tests the dependency. The consumer makes that
  call itself (``probe_due``; a cheap authenticated read of the relayer's status, a
  ``SELECT 1``), whatever lane holds work and whether or not any does; a message that reaches
  the executor first carries it instead. A probe that gets an answer closes the circuit; one
  that fails opens it again.

Any answer from the executor is a success for the breaker, including "this transaction is
refused" (400/422) and "not found": the executor is serving. A probe that passes while real
calls still fail (the status read answers, the sends do not) closes the circuit *untrusted*:
until a real call succeeds, opening it again doubles the cooldown as a failed probe would.

**Liveness** (DESIGN invariant 9): from any state, if the dependency answers and a lane has
work, a message is received within a bounded time.

* ``open`` ends by the clock: a timer set when it opened turns it ``half_open`` after at most
  ``max(cooldown_cap_s, min(retry-after, RETRY_AFTER_CAP_S))``.
* ``half_open`` ends with its probe: the consumer's prober is woken by the change and calls at
  once, and the call is cut off after its timeout (``executor_timeout_s``, the database's
  connect and pool timeouts); an answer closes the circuit. A probe carried by a message is
  bounded by the same timeout, and one that ends without a verdict hands the probe back.
* ``closed``: every unpaused lane's pollers are receiving or about to: a poller waits only for
  the switch, an open circuit, or room, and room frees as messages finish (each bounded by
  ``consumer_message_timeout_s``; the fast lane has headroom of its own, the normal lane its
  guaranteed share).

So with the shipped defaults a lane with work is received within about 5 s (the cap) plus one
probe after the dependency answers again; for a pool of relayers, see queue_consumer.pool.
tests/test_receiving_liveness.py checks it as a state machine (lanes, switch, in-flight cap,
held gasless requests, one relayer or three)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from queue_consumer import metrics
from relay_core.executor import ErrorKind, ExecutorError

log = logging.getLogger(__name__)

T = TypeVar("T")

# The longest a 429's retry-after keeps the circuit open: past it the consumer probes (an
# executor that still refuses answers the probe 429 again, at no cost to any message).
RETRY_AFTER_CAP_S = 30.0

# What says "the executor cannot serve now" (rather than "it refuses this transaction").
_UNAVAILABLE = frozenset(
    {ErrorKind.timeout, ErrorKind.connection, ErrorKind.server_error, ErrorKind.rate_limited}
    | {ErrorKind.refused}
)


class CircuitState(StrEnum):
    closed = "closed"
    open = "open"
    half_open = "half_open"


class Circuit(Protocol):
    """What the receivers wait on: a breaker, or the relayer pool (queue_consumer.pool)."""

    name: str

    @property
    def state(self) -> CircuitState: ...
    @property
    def closed(self) -> bool: ...
    @property
    def reopens_at(self) -> float: ...
    def retry_in(self) -> float: ...
    async def wait_change(self, until: float | None) -> None: ...


class CircuitOpen(Exception):
    """The call was not made: the circuit is open (or half-open with its probe in flight)."""

    def __init__(self, retry_in_s: float) -> None:
        super().__init__(f"executor circuit open; next try in {retry_in_s:.1f} s")
        self.retry_in_s = retry_in_s


def executor_unavailable(error: BaseException) -> bool:
    if isinstance(error, ExecutorError):
        return error.kind in _UNAVAILABLE
    return isinstance(error, TimeoutError | OSError)


class CircuitBreaker:
    def __init__(
        self,
        *,
        name: str = "executor",
        failure_threshold: int = 5,
        cooldown_s: float = 1.0,
        cooldown_cap_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        is_outage: Callable[[BaseException], bool] = executor_unavailable,
    ) -> None:
        self.name = name
        self.failure_threshold = failure_threshold
        self._base_cooldown = cooldown_s
        self._cooldown_cap = cooldown_cap_s
        self._clock = clock
        self._is_outage = is_outage
        self._state = CircuitState.closed
        self._failures = 0
        self._cooldown = cooldown_s
        self._reopen_at = 0.0
        self._opened_at = 0.0
        self._probing = False
        self._trusted = True  # a real call has succeeded since it last closed
        self._changed = asyncio.Event()
        self.changes = 0  # how many times it changed (what a waiter wakes on)
        self.last_error = ""
        self.opened = 0  # how many times it opened (for the summary and /health)
        self.listeners: list[Callable[[], None]] = []  # told of every change (the pool)

    # --- state ------------------------------------------------------------------------------

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.open and self._clock() >= self._reopen_at:
            self._set(CircuitState.half_open)
            log.warning("consumer.circuit.half_open", extra={"circuit": self.name})
        return self._state

    @property
    def closed(self) -> bool:
        return self.state is CircuitState.closed

    def now(self) -> float:
        return self._clock()

    @property
    def reopens_at(self) -> float:
        """When an open circuit turns half-open."""
        return self._reopen_at

    def retry_in(self) -> float:
        """Seconds until a call could be tried (0 when one could be tried now)."""
        state = self.state
        if state is CircuitState.open:
            return max(0.0, self._reopen_at - self._clock())
        if state is CircuitState.half_open and self._probing:
            return self._base_cooldown
        return 0.0

    def may_call(self) -> bool:
        """Whether a call would be let through now (without taking the probe)."""
        state = self.state
        return state is CircuitState.closed or (
            state is CircuitState.half_open and not self._probing
        )

    def probe_due(self) -> bool:
        """Half-open and nobody is probing: the consumer's prober should call now."""
        return self.state is CircuitState.half_open and not self._probing

    def describe(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "consecutiveFailures": self._failures,
            "retryInS": round(self.retry_in(), 1),
            "opened": self.opened,
            "lastError": self.last_error or None,
        }

    # --- calls ------------------------------------------------------------------------------

    def admit(self) -> bool:
        """Let one call through or raise :class:`CircuitOpen`. Returns True when this call is
        the half-open probe; its outcome must be reported (``record`` or ``release``)."""
        state = self.state
        if state is CircuitState.closed:
            return False
        if state is CircuitState.half_open and not self._probing:
            self._probing = True
            return True
        raise CircuitOpen(self.retry_in())

    def record(self, error: BaseException | None, *, probe: bool) -> None:
        """The outcome of a call: None for an answer, else what went wrong. Calls that were
        not admitted (the database's) are recorded with ``probe=False``."""
        if error is not None and self._is_outage(error):
            self._failure(error, probe=probe)
        else:
            self._success(probe=probe)

    def release(self, *, probe: bool) -> None:
        """An admitted call ended without a verdict (cancelled, or never made)."""
        if probe and self._probing:
            self._probing = False
            self._notify()

    def _success(self, *, probe: bool) -> None:
        self._failures = 0
        if not probe:
            # A call admitted before the circuit opened, answered late, does not say the
            # dependency serves now (nor shorten a 429's retry-after): only a probe closes it.
            if self._state is CircuitState.closed and not self._trusted:
                self._trusted = True
                self._cooldown = self._base_cooldown
            return
        self._probing = False
        if self._state is not CircuitState.closed:
            log.warning(
                "consumer.circuit.closed",
                extra={"circuit": self.name, "open_s": round(self._clock() - self._opened_at, 1)},
            )
            self._trusted = False
            self._set(CircuitState.closed)

    def _failure(self, error: BaseException, *, probe: bool) -> None:
        self.last_error = str(error)[:200]
        if probe:
            self._probing = False
            self._cooldown = min(self._cooldown * 2, self._cooldown_cap)
            self._open(error)
            return
        if self._state is not CircuitState.closed:
            return  # a call admitted before it opened: already counted
        self._failures += 1
        if self._failures >= self.failure_threshold:
            if not self._trusted:  # closed by a probe, and real calls still fail
                self._cooldown = min(self._cooldown * 2, self._cooldown_cap)
            self._open(error)

    def _open(self, error: BaseException) -> None:
        cooldown = self._cooldown
        retry_after = getattr(error, "retry_after_s", None)
        if retry_after:
            cooldown = max(cooldown, min(float(retry_after), RETRY_AFTER_CAP_S))
        now = self._clock()
        if self._state is CircuitState.closed:
            self._opened_at = now
            self.opened += 1
            metrics.CIRCUIT_OPENS.inc()
        self._reopen_at = now + cooldown
        log.warning(
            "consumer.circuit.opened",
            extra={
                "circuit": self.name,
                "consecutiveFailures": self._failures,
                "cooldown_s": round(cooldown, 1),
                "error": self.last_error,
            },
        )
        self._failures = 0
        self._set(CircuitState.open)

    # --- waiting ----------------------------------------------------------------------------

    async def wait_change(self, until: float | None) -> None:
        """Until the circuit changes, or its clock reaches ``until``."""
        event = self._changed
        timeout = None if until is None else max(0.0, until - self._clock())
        with contextlib.suppress(TimeoutError):
            # Jitter, so several pollers do not all wake in the same instant.
            limit = None if timeout is None else timeout + random.uniform(0, 0.05)
            await asyncio.wait_for(event.wait(), limit)

    def _set(self, state: CircuitState) -> None:
        self._state = state
        self._notify()

    def _notify(self) -> None:
        self.changes += 1
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in self.listeners:
            listener()


async def probe_when_due(
    breaker: CircuitBreaker, call: Callable[[], Awaitable[Any]], timeout_s: float
) -> None:
    """The consumer's own prober for one circuit: whenever it is half-open and nobody is
    probing, ``call`` (cut off after ``timeout_s``) decides it. Runs until cancelled."""
    while True:
        if not breaker.probe_due():
            state = breaker.state
            await breaker.wait_change(breaker.reopens_at if state is CircuitState.open else None)
            continue
        try:
            probe = breaker.admit()
        except CircuitOpen:
            continue
        try:
            async with asyncio.timeout(timeout_s):
                await call()
        except asyncio.CancelledError:
            breaker.release(probe=probe)
            raise
        except Exception as exc:
            log.info(
                "consumer.circuit.probe_failed",
                extra={"circuit": breaker.name, "error": str(exc)[:200]},
            )
            breaker.record(exc, probe=probe)
        else:
            breaker.record(None, probe=probe)


class Permit:
    """One admitted executor call (see :meth:`ExecutorGuard.slot`)."""

    def __init__(self, breaker: CircuitBreaker | None, probe: bool) -> None:
        self._breaker = breaker
        self.probe = probe
        self.judged = False

    async def run(self, call: Awaitable[T], *, timeout_s: float | None = None) -> T:
        """Make the call (cut off after ``timeout_s``) and report how it went."""
        try:
            async with asyncio.timeout(timeout_s):
                result = await call
        except (ExecutorError, TimeoutError) as exc:
            self._judge(exc)
            raise
        self._judge(None)
        return result

    def _judge(self, error: BaseException | None) -> None:
        if self._breaker is not None and not self.judged:
            self.judged = True
            self._breaker.record(error, probe=self.probe)


class ExecutorGuard:
    """Every executor call of the process: a slot of the in-flight limit, then the breaker."""

    def __init__(
        self, breaker: CircuitBreaker, max_in_flight: int, slots: asyncio.Semaphore | None = None
    ) -> None:
        """``slots``: the limit shared by the relayers of one executor instance (its own)."""
        self.breaker = breaker
        self.max_in_flight = max_in_flight
        self._slots = slots or asyncio.Semaphore(max_in_flight)
        self.in_flight = 0

    async def within_limit(self, call: Awaitable[T]) -> T:
        """A call that holds a slot of the in-flight limit but is judged by its caller (the
        consumer's own probe)."""
        async with self._slots:
            self.in_flight += 1
            try:
                return await call
            finally:
                self.in_flight -= 1

    @contextlib.asynccontextmanager
    async def slot(self, *, counted: bool = True) -> AsyncIterator[Permit]:
        """Hold a slot for one call. ``counted`` calls (the message path) are admitted and
        judged by the breaker; others only pass while it is closed. Raises CircuitOpen.
        A permit left without a call (the caller found nothing to send) gives its turn back."""
        async with self._slots:
            if counted:
                permit = Permit(self.breaker, self.breaker.admit())
            elif self.breaker.closed:
                permit = Permit(None, False)
            else:
                raise CircuitOpen(self.breaker.retry_in())
            self.in_flight += 1
            try:
                yield permit
            finally:
                self.in_flight -= 1
                if counted and not permit.judged:
                    self.breaker.release(probe=permit.probe)
