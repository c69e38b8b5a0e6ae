"""The retry policy as a table: (failure, receive count) → delete | back off | dead-letter."""

from __future__ import annotations

import random

import pytest

from queue_consumer.retry import Action, Failure, Policy, plan_retry

POLICY = Policy(max_receive_count=3, base_s=2.0, cap_s=60.0)


@pytest.mark.parametrize(
    ("failure", "receive_count", "retry_after", "action", "low", "high"),
    [
        (None, 1, None, Action.delete, 0, 0),
        (None, 3, None, Action.delete, 0, 0),
        (Failure.transient, 1, None, Action.backoff, 1, 2),
        (Failure.transient, 2, None, Action.backoff, 2, 4),
        (Failure.transient, 3, None, Action.give_up, 0, 0),
        (Failure.transient, 7, None, Action.give_up, 0, 0),
        (Failure.rate_limited, 1, 30.0, Action.backoff, 30, 30),
        (Failure.rate_limited, 2, 0.0, Action.backoff, 2, 4),
        (Failure.rate_limited, 3, 30.0, Action.give_up, 0, 0),
        (Failure.permanent, 1, None, Action.dead_letter, 0, 0),
        (Failure.permanent, 3, None, Action.dead_letter, 0, 0),
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
