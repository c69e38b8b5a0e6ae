"""What the executor says about a transaction, in our terms, applied forward-only.

Webhooks, the consumer's tracker and the status endpoint's refresh all go through
:func:`apply_upstream`, so a late, replayed or reordered report can never move a status
backwards, clear a hash or erase ``confirmedAt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import Change, transition
from relay_core.statuses import TxStatus, can_advance, is_terminal

_UPSTREAM = {
    "pending": TxStatus.submitted,
    "sent": TxStatus.submitted,
    "submitted": TxStatus.submitted,
    "mined": TxStatus.mined,
    "confirmed": TxStatus.confirmed,
    "failed": TxStatus.failed,
    "canceled": TxStatus.canceled,
    "expired": TxStatus.expired,
}

# The executor's statuses of a transaction it holds and has not mined.
UNMINED = frozenset(name for name, ours in _UPSTREAM.items() if ours is TxStatus.submitted)


@dataclass(frozen=True, slots=True)
class UpstreamView:
    status: TxStatus
    hash: str | None
    confirmed_at: datetime | None
    reason: str | None


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _is_noop(data: dict[str, Any]) -> bool:
    """The executor replaced the transaction with a 0-value self-send (expiry or cancel)."""
    reason = str(data.get("status_reason") or "").lower()
    sender, to = str(data.get("from") or "").lower(), str(data.get("to") or "").lower()
    empty = str(data.get("data") or "0x").lower() in ("", "0x")
    return "noop" in reason or (bool(sender) and sender == to and empty)


def interpret(data: dict[str, Any]) -> UpstreamView | None:
    """Map an executor transaction (OZ Relayer fields) to our status; None if unknown."""
    upstream = str(data.get("status") or "").lower()
    status = _UPSTREAM.get(upstream)
    if status is None:
        return None
    reason = data.get("status_reason")
    if status is TxStatus.confirmed and (data.get("is_canceled") or _is_noop(data)):
        # A confirmed no-op means the original transaction did NOT execute.
        status = TxStatus.canceled if data.get("is_canceled") else TxStatus.expired
        reason = reason or "the executor replaced the transaction with a no-op"
    return UpstreamView(
        status=status,
        hash=data.get("hash") or None,
        confirmed_at=_parse_time(data.get("confirmed_at")),
        reason=str(reason) if reason else None,
    )


async def apply_upstream(
    session: AsyncSession, tx: Transaction, view: UpstreamView, *, source: str
) -> bool:
    """Apply ``view`` to ``tx`` forward-only (compare-and-set). False if the row moved on
    meanwhile; the caller reloads and tries again."""
    change = upstream_change(tx, view, source=source)
    if change is None:
        return True  # final: nothing the executor says can change it, and nothing to record
    return await transition(
        session, tx, change.status, source=change.source, reason=change.reason, **change.values
    )


def upstream_change(tx: Transaction, view: UpstreamView, *, source: str) -> Change | None:
    """What applying ``view`` to ``tx`` (as last read) writes: a move forward, or a touch
    (the hash, the last sync) where the status cannot advance; None once the row is final.
    Decided here for :func:`apply_upstream` and for the API's batched webhooks alike."""
    if is_terminal(tx.status):
        return None
    now = utcnow()
    values: dict[str, Any] = {"last_synced_at": now}
    if tx.upstream_missing_since is not None:
        values["upstream_missing_since"] = None  # the executor knows it (again)
    if view.hash and view.hash != tx.hash:
        values["hash"] = view.hash  # the executor may re-broadcast with a new hash
    if not can_advance(tx.status, view.status):
        return Change(tx, tx.status, values=values)
    if view.status is TxStatus.confirmed:
        values["confirmed_at"] = tx.confirmed_at or view.confirmed_at or now
    if view.status in (TxStatus.submitted, TxStatus.mined) and tx.submitted_at is None:
        values["submitted_at"] = now
    if view.status in (TxStatus.failed, TxStatus.expired, TxStatus.canceled):
        values["error"] = view.reason or f"executor reported {view.status.value}"
    if is_terminal(view.status):
        values["inflight_key"] = None
    return Change(tx, view.status.value, source=source, reason=view.reason, values=values)
