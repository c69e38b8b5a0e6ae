"""The jam limit in blocks: a relayer's oldest submitted transaction counted in the blocks
made since the watch first saw it oldest; the seconds limit still applies, and a relayer
that mined since then is moving, not jammed."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from queue_consumer.settings import ConsumerSettings
from queue_consumer.watch import Watch
from relay_core.db.models import utcnow
from relay_core.pool import Held, RelayerState


def _watch(settings: ConsumerSettings, **limits: Any) -> Watch:
    pool = SimpleNamespace(members={})
    rpc = SimpleNamespace()  # a chain to read (the heads are given to the watch below)
    return Watch(pool, None, settings.model_copy(update=limits), rpc)  # type: ignore[arg-type]


def _member(oldest_s_ago: float | None, count: int = 3) -> Any:
    oldest = None if oldest_s_ago is None else utcnow() - timedelta(seconds=oldest_s_ago)
    return SimpleNamespace(
        id="relayer-1",
        held=Held(count, oldest),
        spec=SimpleNamespace(min_balance_wei=0),
        balance_wei=None,
    )


def test_the_oldest_is_jammed_once_it_has_waited_the_blocks(
    consumer_settings: ConsumerSettings,
) -> None:
    watch = _watch(consumer_settings, relayer_jam_after_blocks=5, relayer_jam_after_s=3600)
    member, now = _member(10), utcnow()
    assert watch.blocks_waited(member, 100, now) == 0  # first seen at block 100
    assert watch.verdict(member, now, set(), watch.blocks_waited(member, 104, now))[0] is (
        RelayerState.ok
    )
    state, detail = watch.verdict(member, now, set(), watch.blocks_waited(member, 105, now))
    assert state is RelayerState.jammed
    assert "5 blocks" in detail
    # Mined since the watch saw it oldest: moving (the executor is asked before any verdict).
    assert watch.moving_since(member, now) == now


def test_a_new_oldest_starts_its_count_again_and_a_head_unread_gives_no_count(
    consumer_settings: ConsumerSettings,
) -> None:
    watch = _watch(consumer_settings, relayer_jam_after_blocks=5, relayer_jam_after_s=3600)
    now = utcnow()
    first = _member(10)
    watch.blocks_waited(first, 100, now)
    assert watch.blocks_waited(first, 104, now) == 4
    mined = _member(2)  # the oldest was mined: the next one is the oldest now
    assert watch.blocks_waited(mined, 110, now) == 0
    assert watch.blocks_waited(mined, None, now) is None
    assert watch.blocks_waited(_member(None), 200, now) is None  # nothing submitted


def test_the_seconds_still_count_and_blocks_count_only_with_a_limit(
    consumer_settings: ConsumerSettings,
) -> None:
    watch = _watch(consumer_settings, relayer_jam_after_blocks=0, relayer_jam_after_s=30)
    member, now = _member(40), utcnow()
    assert watch.verdict(member, now, set(), 1_000)[0] is RelayerState.jammed  # by the seconds
    assert watch.moving_since(member, now) == now - timedelta(seconds=30)
    assert watch.verdict(_member(10), now, set(), 1_000)[0] is RelayerState.ok  # blocks: off
    without_chain = Watch(
        SimpleNamespace(members={}),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        consumer_settings.model_copy(update={"relayer_jam_after_blocks": 5}),
        None,
    )
    assert without_chain.jam_after_blocks == 0  # no chain to read: the seconds alone
