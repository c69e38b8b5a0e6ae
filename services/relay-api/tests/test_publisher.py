"""The outbox publisher on its own: order, batching, its bound and draining on stop (the
integration with SQS and the sweeper is in test_outbox)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from relay_api import metrics
from relay_api.outbox.publisher import Publisher
from relay_core.queue import TransactionMessage
from relay_core.statuses import TxType


class _Queue:
    """Records each send; holds it until ``release`` is set."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def send(self, messages: Sequence[TransactionMessage]) -> set[str]:
        await self.release.wait()
        self.sent.append([m.transaction_id for m in messages])
        return set()  # nothing to mark: the session below is never written to


class _Session:
    async def __aenter__(self) -> _Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def begin(self) -> _Session:
        return self


def _messages(*ids: str) -> list[TransactionMessage]:
    return [TransactionMessage.new(i, TxType.direct) for i in ids]


def _deferred() -> float:
    return metrics.OUTBOX_DEFERRED._value.get()  # type: ignore[attr-defined]


async def test_messages_go_out_in_order_in_batches_and_past_the_bound_to_the_sweeper() -> None:
    queue = _Queue()
    publisher = Publisher(queue, lambda: _Session(), max_pending=5, max_batch=3, linger_s=0)  # type: ignore[arg-type]
    deferred = _deferred()
    publisher.publish(_messages("a", "b", "c", "d"))
    publisher.publish(_messages("e", "f", "g"))  # room for one: f and g are the sweeper's
    assert publisher.backlog() == 5
    assert _deferred() - deferred == 2
    assert publisher.oldest_unsent() is None  # not running: the sweeper may send them all

    publisher.start()
    await publisher.stop()
    assert queue.sent == [["a", "b", "c"], ["d", "e"]]
    assert publisher.backlog() == 0


async def test_a_message_being_sent_is_held_until_its_send_is_over() -> None:
    queue = _Queue()
    queue.release.clear()
    publisher = Publisher(queue, lambda: _Session(), linger_s=0)  # type: ignore[arg-type]
    publisher.start()
    try:
        publisher.publish(_messages("a"))
        await asyncio.sleep(0.05)  # taken for a send, which waits
        assert publisher.backlog() == 1
        assert publisher.oldest_unsent() is not None  # the sweeper leaves it alone
        publisher.publish(_messages("b", "c"))
        queue.release.set()
        await asyncio.sleep(0.05)
        assert queue.sent == [["a"], ["b", "c"]]
        assert publisher.backlog() == 0
        assert publisher.oldest_unsent() is None
    finally:
        await publisher.stop()


async def test_stop_gives_up_on_a_send_that_does_not_end() -> None:
    queue = _Queue()
    queue.release.clear()
    publisher = Publisher(queue, lambda: _Session(), linger_s=0)  # type: ignore[arg-type]
    publisher.start()
    publisher.publish(_messages("a"))
    await publisher.stop(timeout_s=0.1)  # returns: the row is the sweeper's
    assert queue.sent == []
