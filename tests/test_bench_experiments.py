"""The benchmark's experiments change what they say they change (bench/experiments.py)."""

from __future__ import annotations

import pytest

from bench import experiments
from relay_api.outbox.queue import WorkQueue
from relay_core.queue import TransactionMessage
from relay_core.statuses import TxType


class _NoSqs:
    async def send_message_batch(self, **_: object) -> object:
        raise AssertionError("no_sqs_send must not call SQS")

    async def get_queue_url(self, **_: object) -> object:
        raise AssertionError("no_sqs_send must not look a queue up")


async def test_no_sqs_send_takes_every_message_as_sent_without_calling_sqs(monkeypatch):
    monkeypatch.setattr(WorkQueue, "send", WorkQueue.send)  # restored after the test
    experiments.apply({"no_sqs_send"})
    messages = [
        TransactionMessage.new(f"00000000-0000-4000-8000-00000000000{n}", TxType.direct)
        for n in range(3)
    ]
    queue = WorkQueue(_NoSqs(), {"normal": "q"}, timeout_s=1.0)
    assert await queue.send(messages) == {message.transaction_id for message in messages}


def test_an_unknown_experiment_is_refused(monkeypatch):
    monkeypatch.setenv("BENCH_EXPERIMENTS", "no_sqs_send,no_such_thing")
    with pytest.raises(SystemExit, match="no_such_thing"):
        experiments.enabled()
