"""What an attempt that raised becomes (stages/outcome.py): the database not answering is
waited out, whatever shape the driver gave it; anything else is the attempt's own."""

from __future__ import annotations

import sqlalchemy.exc

from queue_consumer.retry import Failure
from queue_consumer.stages.outcome import database_down, of_error


def test_a_connect_cut_in_its_handshake_is_the_database_down() -> None:
    cut = RuntimeError("Transport does not expose socket instance")
    assert database_down(cut)
    outcome = of_error(cut, database_retry_in_s=2.0)
    assert outcome is not None
    assert outcome.failure is Failure.deferred  # waits for the database, no back-off of its own
    assert outcome.database_error is cut  # counted by the database circuit
    assert outcome.retry_after_s is not None
    assert 3.0 <= outcome.retry_after_s <= 5.0


def test_other_errors_keep_their_own_outcome() -> None:
    assert not database_down(RuntimeError("a bug"))
    assert of_error(RuntimeError("a bug"), 0.0) is None  # logged as unexpected by the worker
    refused = sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate"))
    answered = of_error(refused, 0.0)
    assert answered is not None
    assert answered.failure is Failure.transient
    timed_out = of_error(TimeoutError(), 0.0)
    assert timed_out is not None
    assert timed_out.action == "timeout"
