"""The retry policy as a table: (failure, receive count) → delete | back off | dead-letter."""

from __future__ import annotations

import random

import pytest

from queue_consumer.retry import Action, Failure, Policy, plan_retry, shortest_retry_span_s
from queue_consumer.settings import ConsumerSettings

POLICY = Policy(max_receive_count=3, base_s=2.0, cap_s=60.0)


@pytest.mark.parametrize(
    ("failure", "receive_count", "retry_after", "action", "low", "high"),
    [
        (None, 1, None, Action.delete, 0, 0),
        (None, 3, None, Action.delete, 0, 0),
        (Failure.transient, 1, None, Action.backoff, 1, 2),
        (Failure.transient, 2, None, Action.backoff, 2, 4),
        # The last allowed receive never leaves a live transaction to the redrive policy.
        (Failure.transient, 3, None, Action.requeue, 4, 8),
        (Failure.transient, 7, None, Action.requeue, 30, 60),
        (Failure.rate_limited, 1, 30.0, Action.backoff, 30, 30),
        (Failure.rate_limited, 2, 0.0, Action.backoff, 2, 4),
        (Failure.rate_limited, 3, 30.0, Action.requeue, 30, 30),
        # A requeued copy is delayed at most SQS's 15 minutes.
        (Failure.rate_limited, 3, 7200.0, Action.requeue, 900, 900),
        # An unexpected error is retried, but the redrive policy ends it (never requeued).
        (Failure.error, 1, None, Action.backoff, 1, 2),
        (Failure.error, 3, None, Action.backoff, 4, 8),
        # Waiting out someone else's failure: back exactly when asked, however many receives.
        (Failure.deferred, 1, 3.0, Action.backoff, 3, 3),
        (Failure.deferred, 2, 0.4, Action.backoff, 1, 1),
        (Failure.held, 2, 2.0, Action.backoff, 2, 2),
        (Failure.deferred, 3, 5.0, Action.requeue, 5, 5),
        (Failure.permanent, 1, None, Action.dead_letter, 0, 0),
        (Failure.permanent, 3, None, Action.dead_letter, 0, 0),
        (Failure.exhausted, 2, None, Action.dead_letter, 0, 0),
        (Failure.poison, 1, None, Action.dead_letter, 0, 0),
    ],
)
def test_plan_retry_table(
    failure: Failure | None,
    receive_count: int,
    retry_after: float | None,
    action: Action,
    low: int,
    high: int,
) -> None:
    for seed in range(50):
        plan = plan_retry(
            failure, receive_count, POLICY, retry_after_s=retry_after, rng=random.Random(seed)
        )
        assert plan.action is action
        assert low <= plan.delay_s <= high


def test_backoff_grows_with_the_transactions_own_failures_not_its_receives() -> None:
    # Received 30 times (circuit-open deferrals, a settle wait, held turns) but failed once:
    # its back-off is that of one failure, not of thirty.
    policy = Policy(max_receive_count=40, base_s=2.0, cap_s=300.0)
    for seed in range(50):
        once = plan_retry(Failure.transient, 30, policy, attempts=1, rng=random.Random(seed))
        assert 1 <= once.delay_s <= 2
        often = plan_retry(Failure.rate_limited, 2, policy, attempts=6, rng=random.Random(seed))
        assert 32 <= often.delay_s <= 64
        # Without a count of its own (the database never answered), the receives count.
        unknown = plan_retry(Failure.transient, 6, policy, rng=random.Random(seed))
        assert 32 <= unknown.delay_s <= 64


def test_backoff_grows_exponentially_and_stops_at_the_cap() -> None:
    policy = Policy(max_receive_count=20, base_s=2.0, cap_s=60.0)
    ceilings = [
        max(
            plan_retry(Failure.transient, n, policy, rng=random.Random(s)).delay_s
            for s in range(200)
        )
        for n in range(1, 10)
    ]
    assert ceilings[:5] == [2, 4, 8, 16, 32]
    assert ceilings[5:] == [60, 60, 60, 60]


def test_backoff_is_jittered() -> None:
    policy = Policy(max_receive_count=20, base_s=2.0, cap_s=600.0)
    delays = {
        plan_retry(Failure.transient, 8, policy, rng=random.Random(s)).delay_s for s in range(50)
    }
    assert len(delays) > 10


def test_the_default_receive_count_outlasts_the_retry_budget() -> None:
    # A transient failure is retried for the budget; the redrive policy must not end it
    # sooner even when every back-off draws its shortest jitter.
    settings = ConsumerSettings(environment="test")
    policy = Policy(
        max_receive_count=settings.queue_max_receive_count,
        base_s=settings.consumer_backoff_base_s,
        cap_s=settings.consumer_backoff_cap_s,
    )
    assert shortest_retry_span_s(policy) >= settings.consumer_retry_budget_s
    shorter = Policy(max_receive_count=settings.queue_max_receive_count - 20, base_s=2, cap_s=300)
    assert shortest_retry_span_s(shorter) < settings.consumer_retry_budget_s
