"""The public view of a transaction: what the status endpoint returns and Redis caches."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from relay_core.db.models import Transaction


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds") + "Z"


def status_entry(tx: Transaction) -> dict[str, Any]:
    """camelCase, JSON-ready. ``clientId`` is kept for the ownership check on a cache hit and
    removed before the entry reaches a client."""
    return {
        "transactionId": tx.id,
        "clientId": tx.client_id,
        "type": tx.type,
        "status": tx.status,
        "hash": tx.hash,
        "errorMessage": tx.error,
        "createdAt": rfc3339(tx.created_at),
        "updatedAt": rfc3339(tx.updated_at),
        "submittedAt": rfc3339(tx.submitted_at),
        "confirmedAt": rfc3339(tx.confirmed_at),
        **cost_entry(tx),
    }


def cost_entry(tx: Transaction, written: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``tx`` cost, read from its receipt once it reached the chain (all None before, and
    for a transaction that never did): the status view and the client callbacks carry it.
    Wei amounts are decimal strings, as everywhere in the API. ``written``: columns written to
    the row and not yet on ``tx`` (a change being recorded)."""
    written = written or {}
    return {
        "blockNumber": written.get("block_number", tx.block_number),
        "gasUsed": written.get("gas_used", tx.gas_used),
        "effectiveGasPrice": written.get("effective_gas_price", tx.effective_gas_price),
        "feeWei": written.get("fee_wei", tx.fee_wei),
    }
