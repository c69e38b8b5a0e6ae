"""The executor circuit breaker and the in-flight limit, on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from queue_consumer.circuit import (
    RETRY_AFTER_CAP_S,
    CircuitBreaker,
    CircuitOpen,
    CircuitState,
    ExecutorGuard,
    probe_when_due,
)
from queue_consumer.lanes import Lane
from queue_consumer.stages import receiving
from relay_core.executor import ErrorKind, ExecutorError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def down(kind: ErrorKind = ErrorKind.connection, after: float | None = None) -> ExecutorError:
    return ExecutorError(kind, "executor down", retry_after_s=after)


def breaker(clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=3, cooldown_s=2.0, cooldown_cap_s=8.0, clock=clock)


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.connection,
        ErrorKind.timeout,
        ErrorKind.server_error,
        ErrorKind.rate_limited,
        ErrorKind.refused,
    ],
)
def test_consecutive_unavailability_opens_it(kind: ErrorKind) -> None:
    b = breaker(Clock())
    for _ in range(2):
        b.record(down(kind), probe=b.admit())
    assert b.state is CircuitState.closed
    b.record(down(kind), probe=b.admit())
    assert b.state is CircuitState.open
    with pytest.raises(CircuitOpen):
        b.admit()


@pytest.mark.parametrize("kind", [ErrorKind.rejected, ErrorKind.not_found])
def test_an_answer_about_the_transaction_is_a_success(kind: ErrorKind) -> None:
    b = breaker(Clock())
    for _ in range(10):
        b.record(down(ErrorKind.timeout), probe=False)
        b.record(down(kind), probe=False)
    assert b.state is CircuitState.closed


def test_a_success_in_between_resets_the_count() -> None:
    b = breaker(Clock())
    for _ in range(5):
        b.record(down(), probe=False)
        b.record(down(), probe=False)
        b.record(None, probe=False)
    assert b.state is CircuitState.closed


def test_after_the_cooldown_one_probe_passes_and_its_success_closes_it() -> None:
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record(down(), probe=False)
    assert b.retry_in() == pytest.approx(2.0)
    clock.now += 2.0
    assert b.state is CircuitState.half_open
    assert b.admit() is True  # the probe
    with pytest.raises(CircuitOpen):
        b.admit()  # one at a time
    assert not b.may_call()
    b.record(None, probe=True)
    assert b.state is CircuitState.closed
    assert b.admit() is False


def test_a_failed_probe_opens_it_again_for_longer_up_to_the_cap() -> None:
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record(down(), probe=False)
    cooldowns = []
    for _ in range(4):
        clock.now += b.retry_in()
        probe = b.admit()
        assert probe
        b.record(down(), probe=True)
        cooldowns.append(b.retry_in())
    assert cooldowns == [4.0, 8.0, 8.0, 8.0]


def test_a_429_keeps_it_open_at_least_as_long_as_asked() -> None:
    b = breaker(Clock())
    for _ in range(3):
        b.record(down(ErrorKind.rate_limited, after=30), probe=False)
    assert b.retry_in() == pytest.approx(30.0)


def test_a_probe_that_ends_without_a_verdict_lets_the_next_one_through() -> None:
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record(down(), probe=False)
    clock.now += 2.0
    assert b.admit() is True
    b.release(probe=True)
    assert b.admit() is True


async def test_pollers_of_every_lane_wait_while_it_is_open_and_the_consumer_probes_it_itself() -> (
    None
):
    b = CircuitBreaker(failure_threshold=3, cooldown_s=0.2)  # the real clock: waits are real
    lanes = [Lane(name, name, name, None, 1) for name in ("normal", "fast")]  # type: ignore[arg-type]
    for lane in lanes:
        lane.receiving.set()
        assert receiving.decide(lane, [b]) == receiving.Receive(10)
    for _ in range(3):
        b.record(down(), probe=False)
    for lane in lanes:  # open: no lane receives, whichever holds the work
        decision = receiving.decide(lane, [b])
        assert isinstance(decision, receiving.Wait)
        assert decision.until == b.reopens_at
    calls: list[str] = []
    answers = iter([down(), None])  # the first probe fails, the second gets an answer

    async def status() -> None:
        calls.append("probe")
        answer = next(answers)
        if answer is not None:
            raise answer

    prober = asyncio.create_task(probe_when_due(b, status, timeout_s=1))
    try:
        await asyncio.wait_for(_until(lambda: b.closed), 5)
    finally:
        prober.cancel()
    assert calls == ["probe", "probe"]  # no message was needed to carry either
    for lane in lanes:
        assert receiving.decide(lane, [b]) == receiving.Receive(10)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_a_probe_that_passes_while_real_calls_still_fail_does_not_reset_the_cooldown() -> None:
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record(down(), probe=False)
    cooldowns = []
    for _ in range(4):
        clock.now += b.retry_in()
        b.record(None, probe=b.admit())  # the status read answers...
        assert b.closed
        for _ in range(3):
            b.record(down(), probe=False)  # ...the sends do not
        cooldowns.append(b.retry_in())
    assert cooldowns == [4.0, 8.0, 8.0, 8.0]
    clock.now += b.retry_in()
    b.record(None, probe=b.admit())
    b.record(None, probe=False)  # a real call answered: trusted again
    for _ in range(3):
        b.record(down(), probe=False)
    assert b.retry_in() == pytest.approx(2.0)


def test_a_429_is_honoured_up_to_a_cap() -> None:
    b = breaker(Clock())
    for _ in range(3):
        b.record(down(ErrorKind.rate_limited, after=3600), probe=False)
    assert b.retry_in() == pytest.approx(RETRY_AFTER_CAP_S)


async def test_the_guard_caps_calls_in_flight() -> None:
    guard = ExecutorGuard(CircuitBreaker(), max_in_flight=3)
    peak = 0

    async def call() -> None:
        nonlocal peak
        async with guard.slot() as permit:
            peak = max(peak, guard.in_flight)
            await permit.run(asyncio.sleep(0.01))

    await asyncio.gather(*(call() for _ in range(20)))
    assert peak == 3
    assert guard.in_flight == 0


async def test_the_guard_reports_timeouts_and_keeps_uncounted_calls_out_while_open() -> None:
    b = CircuitBreaker(failure_threshold=2, cooldown_s=60)
    guard = ExecutorGuard(b, max_in_flight=5)
    for _ in range(2):
        with pytest.raises(TimeoutError):
            async with guard.slot() as permit:
                await permit.run(asyncio.sleep(1), timeout_s=0.01)
    assert b.state is CircuitState.open
    with pytest.raises(CircuitOpen):
        async with guard.slot(counted=False):
            pass


def test_a_late_answer_to_a_call_from_before_does_not_close_it() -> None:
    clock = Clock()
    b = breaker(clock)
    straggler = b.admit()  # admitted while closed, answered after the circuit opened
    for _ in range(3):
        b.record(down(ErrorKind.rate_limited, after=20), probe=False)
    b.record(None, probe=straggler)
    assert b.state is CircuitState.open
    assert b.retry_in() == pytest.approx(20.0)
