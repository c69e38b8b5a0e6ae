"""What the operator's dashboard shows besides the lanes and the DLQ: transactions accepted and
finished per minute over the last minutes, the newest transactions with their statuses, and
the clients granted a policy with no limit at all (flagged)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ApiClient, Transaction, utcnow
from relay_core.policy import SpendPolicy
from relay_core.statuses import TERMINAL
from relay_core.views import rfc3339


def _minute(session: AsyncSession, column: Any) -> Any:
    """The column truncated to its minute, as text, on MariaDB and SQLite alike."""
    if session.get_bind().dialect.name == "sqlite":
        return func.strftime("%Y-%m-%dT%H:%M", column)
    return func.date_format(column, "%Y-%m-%dT%H:%i")


async def _per_minute(
    session: AsyncSession, column: Any, since: datetime, *where: Any
) -> dict[str, int]:
    minute = _minute(session, column)
    rows = await session.execute(
        select(minute, func.count()).where(column >= since, *where).group_by(minute)
    )
    return {str(at): int(count) for at, count in rows.all()}


async def activity(session: AsyncSession, minutes: int, newest: int) -> dict[str, Any]:
    now = utcnow()
    since = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    accepted = await _per_minute(session, Transaction.created_at, since)
    # A final row is not updated again, so its updated_at is when it finished.
    finished = await _per_minute(
        session,
        Transaction.updated_at,
        since,
        Transaction.status.in_([s.value for s in TERMINAL]),
    )
    buckets = []
    for index in range(minutes):
        minute = (since + timedelta(minutes=index)).strftime("%Y-%m-%dT%H:%M")
        buckets.append(
            {
                "minute": minute + "Z",
                "accepted": accepted.get(minute, 0),
                "finished": finished.get(minute, 0),
            }
        )
    oldest = dict(
        (
            await session.execute(
                select(Transaction.lane, func.min(Transaction.created_at))
                .where(Transaction.status == "pending")
                .group_by(Transaction.lane)
            )
        ).all()
    )
    rows = (
        await session.execute(
            select(Transaction, ApiClient.name)
            .join(ApiClient, ApiClient.id == Transaction.client_id)
            .order_by(Transaction.created_at.desc())
            .limit(newest)
        )
    ).all()
    unlimited = [
        client
        for client in (
            await session.execute(
                select(ApiClient).where(
                    ApiClient.role == "client",
                    ApiClient.revoked_at.is_(None),
                    ApiClient.policy_granted_at.is_not(None),
                )
            )
        ).scalars()
        if SpendPolicy.of(client).unlimited
    ]
    return {
        "clientsWithoutLimits": [
            {
                "id": c.id,
                "name": c.name,
                "grantedAt": rfc3339(c.policy_granted_at),
                "grantedBy": c.policy_granted_by,
            }
            for c in unlimited
        ],
        "oldestPendingAgeS": {
            str(lane): round((now - at).total_seconds(), 1) for lane, at in oldest.items()
        },
        "minutes": buckets,
        "transactions": [
            {
                "transactionId": tx.id,
                "client": client,
                "type": tx.type,
                "status": tx.status,
                "attempts": tx.attempts,
                "error": tx.error,
                "createdAt": rfc3339(tx.created_at),
                "updatedAt": rfc3339(tx.updated_at),
            }
            for tx, client in rows
        ],
    }
