"""What to do with a message after an attempt: one pure function, tested as a table.

A transaction's back-off grows with *its own* failed attempts (its executor calls that
failed), never with the receives of its message: a message put back because someone else
failed (the executor circuit open, the database down, an earlier attempt still settling, a
gasless predecessor not yet executed) waits exactly as long as that takes (``deferred`` and
``held``), so when the outage ends it is not also serving minutes of back-off it never earned
(DESIGN invariant 9).

How long a transient failure is retried is not a matter of receive counts: the transaction
decides that (a time budget counted from its first attempt, ``stages.submitting``), and the
message only carries it. So a message on its last allowed receive is never left for SQS's
redrive while it still has work: a fresh copy is sent (its receive count starts again) and this
one deleted. The redrive policy then moves to the DLQ only messages no consumer could act on at
all (a consumer dying on every receive).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class Failure(StrEnum):
    """Why an attempt did not finish the message."""

    transient = "transient"  # timeout, connection error, 5xx, database down, circuit open
    rate_limited = "rate_limited"  # 429, honour the executor's `after`
    permanent = "permanent"  # executor 400/422: this transaction will never be accepted
    exhausted = "exhausted"  # transient for longer than the retry budget: marked failed
    poison = "poison"  # unparseable, unknown schema or unknown transaction
    # An unexpected error (a bug, or a row the code cannot handle): retried like a transient
    # failure, but never requeued, so the redrive policy takes it to the DLQ in the end.
    error = "error"
    # Waiting its turn (a gasless nonce whose predecessor has not executed): back exactly
    # when asked, without the growing back-off; requeued like a transient failure.
    held = "held"
    # Waiting out someone else's failure (the circuit open, the database down, an earlier
    # attempt settling, a concurrent writer): back exactly when asked, like ``held``.
    deferred = "deferred"


class Action(StrEnum):
    delete = "delete"
    backoff = "backoff"  # ChangeMessageVisibility(delay): try again later
    requeue = "requeue"  # last allowed receive: send a fresh copy (delayed), delete this one
    dead_letter = "dead_letter"  # send to the DLQ ourselves, with the reason, then delete


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    delay_s: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    max_receive_count: int = 40
    base_s: float = 2.0
    cap_s: float = 300.0


# SQS caps a visibility timeout at 12 hours and a message delay at 15 minutes.
_MAX_VISIBILITY_S = 12 * 3600
MAX_DELAY_S = 900


def plan_retry(
    failure: Failure | None,
    receive_count: int,
    policy: Policy,
    *,
    retry_after_s: float | None = None,
    attempts: int | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """Decide from the failure kind, the transaction's own failed ``attempts`` and the
    message's ApproximateReceiveCount.

    ``None`` means the attempt succeeded (or there was nothing to do): delete.
    Held and deferred messages come back exactly when asked. Transient failures back off
    exponentially in the transaction's own failed attempts (the receive count when they are
    not known: the database never answered), with jitter, capped, and never sooner than the
    executor asked (429 ``after``). On the last allowed receive the message is requeued.
    """
    if failure is None:
        return Plan(Action.delete)
    if failure in (Failure.permanent, Failure.poison, Failure.exhausted):
        return Plan(Action.dead_letter)
    if failure in (Failure.held, Failure.deferred) and retry_after_s is not None:
        delay = retry_after_s
    else:
        failed = attempts if attempts is not None and attempts > 0 else receive_count
        delay = backoff_s(failed, policy, rng=rng)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
    delay = min(_MAX_VISIBILITY_S, max(1, round(delay)))
    if receive_count >= policy.max_receive_count and failure is not Failure.error:
        return Plan(Action.requeue, min(delay, MAX_DELAY_S))
    return Plan(Action.backoff, delay)


def backoff_s(receive_count: int, policy: Policy, *, rng: random.Random | None = None) -> float:
    ceiling = min(policy.cap_s, policy.base_s * 2 ** max(receive_count - 1, 0))
    return (rng or random).uniform(ceiling / 2, ceiling)  # jitter, but never near zero


def shortest_retry_span_s(policy: Policy) -> float:
    """The least time a message can spend backing off before its last allowed receive: what
    the queue's ``maxReceiveCount`` buys with this policy (every jitter at its low end)."""
    return sum(
        min(policy.cap_s, policy.base_s * 2 ** max(n - 1, 0)) / 2
        for n in range(1, policy.max_receive_count)
    )
