"""What one attempt at a message achieved, the vocabulary every stage answers in: the
settling stage turns it into what happens to the message (``retry.plan_retry``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import sqlalchemy.exc

from queue_consumer.retry import Failure
from relay_wire.statements import connect_cut


@dataclass(frozen=True, slots=True)
class Outcome:
    """``failure`` None means the message is finished."""

    failure: Failure | None = None
    reason: str = ""
    retry_after_s: float | None = None
    action: str = "done"
    # The transaction's own failed attempts, which its back-off grows with (retry.plan_retry).
    attempts: int | None = None
    # What the database answered with, when it did not answer (the database circuit's count).
    database_error: BaseException | None = None

    @classmethod
    def done(cls, action: str) -> Outcome:
        return cls(action=action)


def circuit_open(retry_in_s: float) -> Outcome:
    """A message that found the executor circuit open waits for the circuit, not for a
    back-off of its own: it is visible again soon after the probe is due (the pollers receive
    nothing until the circuit closes, so it then waits in SQS without spending receives)."""
    return Outcome(
        Failure.deferred,
        "executor circuit open",
        retry_after_s=retry_in_s + random.uniform(0.5, 2),
        action="circuit_open",
    )


def database_down(error: BaseException) -> bool:
    """The database did not answer (rather than refusing a statement); a connect the driver
    saw cut during its handshake counts too, whichever pool opened it."""
    return isinstance(
        error,
        sqlalchemy.exc.OperationalError
        | sqlalchemy.exc.InterfaceError
        | sqlalchemy.exc.TimeoutError
        | OSError
        | TimeoutError,
    ) or connect_cut(error)


def of_error(exc: Exception, database_retry_in_s: float) -> Outcome | None:
    """An attempt that raised: timed out, the database down or refusing. None for anything
    else (a bug: the caller logs it)."""
    if isinstance(exc, TimeoutError):
        return Outcome(Failure.transient, "message timed out", action="timeout")
    reason = f"{type(exc).__name__}: {str(exc)[:200]}"
    if database_down(exc):
        # Nothing was recorded: the message waits for the database, not for a back-off of its
        # own (the database circuit stops the pollers if this goes on).
        return Outcome(
            Failure.deferred,
            reason,
            retry_after_s=database_retry_in_s + random.uniform(1, 3),
            action="database_error",
            database_error=exc,
        )
    if isinstance(exc, sqlalchemy.exc.SQLAlchemyError):  # it answered, with an error
        return Outcome(Failure.transient, reason, action="database_error")
    return None
