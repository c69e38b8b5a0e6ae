"""The store's list order: what the executor's list answers, as upstream orders it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayer_stub.transactions.models import Status, Transaction
from relayer_stub.transactions.store import TransactionStore

START = datetime(2026, 1, 1, tzinfo=UTC)


def _tx(n: int, status: Status, confirmed_after_s: float | None = None) -> Transaction:
    created = START + timedelta(seconds=n)
    return Transaction(
        id=f"tx-{n}",
        relayer_id="relayer-1",
        from_address="0x" + "11" * 20,
        to="0x" + "22" * 20,
        data="0x",
        value=0,
        gas_limit=21000,
        gas_price=None,
        max_fee_per_gas=None,
        max_priority_fee_per_gas=None,
        speed="fast",
        created_at=created.isoformat(),
        valid_until_ts=0.0,
        status=status,
        confirmed_at=None
        if confirmed_after_s is None
        else (created + timedelta(seconds=confirmed_after_s)).isoformat(),
    )


def test_confirmed_ones_are_listed_by_their_confirmation_the_others_by_creation() -> None:
    store = TransactionStore(["relayer-1"])
    # tx-0 waited long (confirmed last); tx-1..3 went through at once; tx-4 and 5 are mined.
    for tx in [
        _tx(0, Status.confirmed, confirmed_after_s=60),
        *[_tx(n, Status.confirmed, confirmed_after_s=1) for n in (1, 2, 3)],
        _tx(4, Status.mined),
        _tx(5, Status.mined),
    ]:
        store.add(tx)

    confirmed, total = store.page("relayer-1", 1, 10, Status.confirmed)
    assert [tx.id for tx in confirmed] == ["tx-0", "tx-3", "tx-2", "tx-1"]
    assert total == 4
    second, _ = store.page("relayer-1", 2, 2, Status.confirmed)
    assert [tx.id for tx in second] == ["tx-2", "tx-1"]
    mined, _ = store.page("relayer-1", 1, 10, Status.mined)
    assert [tx.id for tx in mined] == ["tx-5", "tx-4"]
    everything, _ = store.page("relayer-1", 1, 10, None)
    assert [tx.id for tx in everything] == [f"tx-{n}" for n in (5, 4, 3, 2, 1, 0)]
