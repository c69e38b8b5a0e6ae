"""Live transactions in memory, per relayer in creation order (the list is newest first)."""

from __future__ import annotations

from datetime import datetime
from itertools import islice

from relayer_stub.transactions.models import FINAL_STATUSES, Status, Transaction


class TransactionStore:
    def __init__(self, relayer_ids: list[str]) -> None:
        self._by_id: dict[str, Transaction] = {}
        self._by_relayer: dict[str, dict[str, Transaction]] = {rid: {} for rid in relayer_ids}

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, tx: Transaction) -> None:
        self._by_id[tx.id] = tx
        self._by_relayer.setdefault(tx.relayer_id, {})[tx.id] = tx

    def get(self, tx_id: str) -> Transaction | None:
        return self._by_id.get(tx_id)

    def remove(self, tx_id: str) -> Transaction | None:
        tx = self._by_id.pop(tx_id, None)
        if tx is not None:
            self._by_relayer.get(tx.relayer_id, {}).pop(tx_id, None)
        return tx

    def clear(self) -> None:
        self._by_id.clear()
        for txs in self._by_relayer.values():
            txs.clear()

    def page(
        self, relayer_id: str, page: int, per_page: int, status: Status | None
    ) -> tuple[list[Transaction], int]:
        """One page, newest first, and the total number of matches.

        Filtering on a non-final status leaves out transactions with ``is_canceled`` set, as
        upstream's ``list_transactions`` does. Confirmed ones are listed by when they were
        confirmed, newest first, the others by creation, as upstream sorts them since v1.4.0
        (``status_sorted_score`` in OZR:src/repositories/transaction/transaction_redis.rs,
        ``get_sort_key`` in transaction_in_memory.rs).
        """
        txs = self._by_relayer.get(relayer_id, {})
        start = (page - 1) * per_page
        newest_first = reversed(txs.values())
        if status is None:
            return list(islice(newest_first, start, start + per_page)), len(txs)
        skip_canceled = status not in FINAL_STATUSES
        matches = [
            tx
            for tx in newest_first
            if tx.status is status and not (skip_canceled and tx.is_canceled)
        ]
        if status is Status.confirmed:  # nearly in this order already: a linear sort
            matches.sort(key=_confirmed_first, reverse=True)
        return matches[start : start + per_page], len(matches)

    def in_flight(self, relayer_id: str) -> int:
        active = (Status.pending, Status.sent, Status.submitted)
        return sum(1 for tx in self._by_relayer.get(relayer_id, {}).values() if tx.status in active)

    def last_confirmed(self, relayer_id: str) -> str | None:
        """When the relayer's latest confirmed transaction was confirmed (RFC 3339), or None."""
        times = (
            tx.confirmed_at
            for tx in self._by_relayer.get(relayer_id, {}).values()
            if tx.status is Status.confirmed and tx.confirmed_at
        )
        return max(times, default=None)


def _confirmed_first(tx: Transaction) -> datetime:
    return datetime.fromisoformat(tx.confirmed_at or tx.created_at)
