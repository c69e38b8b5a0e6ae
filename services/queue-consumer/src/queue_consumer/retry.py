"""What to do with a message after an attempt: one pure function, tested as a table."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class Failure(StrEnum):
    """Why an attempt did not finish the message."""

    transient = "transient"  # timeout, connection error, 5xx, database down
    rate_limited = "rate_limited"  # 429, honour the executor's `after`
    permanent = "permanent"  # executor 4xx: this transaction will never be accepted
    poison = "poison"  # unparseable, unknown schema or unknown transaction


class Action(StrEnum):
    delete = "delete"
    backoff = "backoff"  # ChangeMessageVisibility(delay): try again later
    dead_letter = "dead_letter"  # send to the DLQ ourselves, with the reason, then delete
    give_up = "give_up"  # last allowed receive: mark failed, let the redrive move it


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    delay_s: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    max_receive_count: int = 3
    base_s: float = 2.0
    cap_s: float = 300.0


# SQS caps a visibility timeout at 12 hours.
_MAX_VISIBILITY_S = 12 * 3600


def plan_retry(
    failure: Failure | None,
    receive_count: int,
    policy: Policy,
    *,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """Decide from the failure kind and the message's ApproximateReceiveCount.

    ``None`` means the attempt succeeded (or there was nothing to do): delete.
    Transient failures back off exponentially with full jitter, capped, and never sooner than
    the executor asked (429 ``after``); on the last allowed receive they give up, which the
    caller records as ``failed`` before SQS's redrive moves the message to the DLQ.
    """
    if failure is None:
        return Plan(Action.delete)
    if failure in (Failure.permanent, Failure.poison):
        return Plan(Action.dead_letter)
    if receive_count >= policy.max_receive_count:
        return Plan(Action.give_up)
    ceiling = min(policy.cap_s, policy.base_s * 2 ** max(receive_count - 1, 0))
    delay = (rng or random).uniform(ceiling / 2, ceiling)  # jitter, but never near zero
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return Plan(Action.backoff, min(_MAX_VISIBILITY_S, max(1, round(delay))))
