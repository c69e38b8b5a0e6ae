"""Protecting the executor: an in-flight limit and a circuit breaker.

The **in-flight limit** caps this process's concurrent executor calls (OpenZeppelin Relayer
serves at most ``RELAYER_CONCURRENCY_LIMIT``, 100 by default, and answers 429 beyond it), so
the consumer does not provoke the 429s it would then have to absorb. Every executor call of the
process takes a slot: submits, in-doubt lookups and the tracker's reads.

The **circuit breaker** stops the consumer from working against an executor that is down. It
counts consecutive failures that say "the executor cannot serve now" (connection refused or
dropped, timeouts, 5xx, 429, 401/403) on the message path (submits and in-doubt lookups; the
tracker's reads neither count nor pass while it is open):

* ``closed``: calls pass. ``failure_threshold`` such failures in a row open it.
* ``open``: no call passes and the pollers stop receiving, so messages wait in SQS without
  spending receive counts. After a cooldown (doubling per failed probe up to a cap, and never
  shorter than a 429's ``retry-after``) it becomes half-open.
* ``half_open``: one call at a time (the probe) tests the executor; the pollers receive one
  message at a time to carry it. A probe that gets an answer closes the circuit; one that fails
  opens it again.

Any answer from the executor is a success for the breaker, including "this transaction is
refused" (400/422) and "not found": the executor is serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import StrEnum
from typing import TypeVar

from queue_consumer import metrics
from relay_core.executor import ErrorKind, ExecutorError

log = logging.getLogger(__name__)

T = TypeVar("T")

# What says "the executor cannot serve now" (rather than "it refuses this transaction").
_UNAVAILABLE = frozenset(
    {
        ErrorKind.timeout,
        ErrorKind.connection,
        ErrorKind.server_error,
        ErrorKind.rate_limited,
        ErrorKind.refused,
    }
)


class CircuitState(StrEnum):
    closed = "closed"
    open = "open"
    half_open = "half_open"


class CircuitOpen(Exception):
    """The call was not made: the circuit is open (or half-open with its probe in flight)."""

    def __init__(self, retry_in_s: float) -> None:
        super().__init__(f"executor circuit open; next try in {retry_in_s:.1f} s")
        self.retry_in_s = retry_in_s


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        cooldown_s: float = 2.0,
        cooldown_cap_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = failure_threshold
        self._base_cooldown = cooldown_s
        self._cooldown_cap = cooldown_cap_s
        self._clock = clock
        self._state = CircuitState.closed
        self._failures = 0
        self._cooldown = cooldown_s
        self._reopen_at = 0.0
        self._opened_at = 0.0
        self._probing = False
        self._ticket: int | None = None  # the message carrying the half-open probe
        self._tickets = 0
        self._changed = asyncio.Event()
        self.changes = 0  # how many times it changed (a waiter's wake-up)
        self.last_error = ""
        self.opened = 0  # how many times it opened (for the summary and /health)

    # --- state ------------------------------------------------------------------------------

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.open and self._clock() >= self._reopen_at:
            self._set(CircuitState.half_open)
            log.warning("consumer.circuit.half_open", extra={"probe": "next executor call"})
        return self._state

    @property
    def closed(self) -> bool:
        return self.state is CircuitState.closed

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
        """The outcome of an admitted call: None for an answer, else what went wrong."""
        if error is not None and _unavailable(error):
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
            # A call admitted before the circuit opened, answered late: it does not say the
            # executor serves now (nor shorten a 429's retry-after). Only a probe closes it.
            return
        self._probing = False
        if self._state is not CircuitState.closed:
            log.warning(
                "consumer.circuit.closed",
                extra={"open_s": round(self._clock() - self._opened_at, 1)},
            )
            self._cooldown = self._base_cooldown
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
            self._open(error)

    def _open(self, error: BaseException) -> None:
        cooldown = self._cooldown
        retry_after = getattr(error, "retry_after_s", None)
        if retry_after:
            cooldown = max(cooldown, float(retry_after))
        now = self._clock()
        if self._state is CircuitState.closed:
            self._opened_at = now
            self.opened += 1
            metrics.CIRCUIT_OPENS.inc()
        self._reopen_at = now + cooldown
        log.warning(
            "consumer.circuit.opened",
            extra={
                "consecutiveFailures": self._failures,
                "cooldown_s": round(cooldown, 1),
                "error": self.last_error,
            },
        )
        self._failures = 0
        self._set(CircuitState.open)

    # --- receiving --------------------------------------------------------------------------

    async def receivable(self, want: int) -> tuple[int, int | None]:
        """How many messages a poller may receive now, waiting while the circuit is open.
        Returns (count, ticket): half-open, one message at a time carries the probe, and its
        poller must :meth:`return_ticket` once that message is handled."""
        while True:
            state = self.state
            if state is CircuitState.closed:
                return want, None
            if state is CircuitState.half_open and not self._probing and self._ticket is None:
                self._tickets += 1
                self._ticket = self._tickets
                return 1, self._ticket
            timeout = self._reopen_at - self._clock() if state is CircuitState.open else None
            await self._wait(timeout)

    def take_ticket(self) -> int | None:
        """Half-open with no probe under way: the ticket of the message that will carry it."""
        if self.state is CircuitState.half_open and not self._probing and self._ticket is None:
            self._tickets += 1
            self._ticket = self._tickets
            return self._ticket
        return None

    def now(self) -> float:
        return self._clock()

    @property
    def reopens_at(self) -> float:
        return self._reopen_at

    async def wait_change(self, until: float | None) -> None:
        """Until the circuit changes, or the clock reaches ``until``."""
        await self._wait(None if until is None else until - self._clock())

    def return_ticket(self, ticket: int | None) -> None:
        if ticket is not None and ticket == self._ticket:
            self._ticket = None
            self._notify()

    async def _wait(self, timeout_s: float | None) -> None:
        event = self._changed
        with contextlib.suppress(TimeoutError):
            # Jitter, so several pollers do not all wake in the same instant.
            limit = None if timeout_s is None else max(0.0, timeout_s) + random.uniform(0, 0.05)
            await asyncio.wait_for(event.wait(), limit)

    def _set(self, state: CircuitState) -> None:
        self._state = state
        self._ticket = None
        self._notify()

    def _notify(self) -> None:
        self.changes += 1
        self._changed.set()
        self._changed = asyncio.Event()


def _unavailable(error: BaseException) -> bool:
    if isinstance(error, ExecutorError):
        return error.kind in _UNAVAILABLE
    return isinstance(error, TimeoutError | OSError)


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

    def __init__(self, breaker: CircuitBreaker, max_in_flight: int) -> None:
        self.breaker = breaker
        self.max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        self.in_flight = 0

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
