"""SQL for client notifications."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from relay_core.db.models import ApiClient, Notification
from relay_wire.direct import DirectPool


async def due(
    session: AsyncSession,
    now: datetime,
    limit: int,
    *,
    skip_clients: Collection[str] = (),
    skip_ids: Collection[int] = (),
) -> list[tuple[Notification, str | None]]:
    """Pending notifications whose time has come and that are first in line for their
    transaction (an earlier one still pending holds the later ones back: order per
    transaction), leaving out clients already at their share and attempts in flight.
    Returned with the client's signing secret."""
    earlier = aliased(Notification)
    query = (
        select(Notification, ApiClient.callback_secret)
        .join(ApiClient, ApiClient.id == Notification.client_id)
        .where(
            Notification.state == "pending",
            Notification.next_attempt_at <= now,
            ~exists().where(
                and_(
                    earlier.transaction_id == Notification.transaction_id,
                    earlier.state == "pending",
                    earlier.id < Notification.id,
                )
            ),
        )
        .order_by(Notification.id)
        .limit(limit)
    )
    if skip_clients:
        query = query.where(Notification.client_id.not_in(list(skip_clients)))
    if skip_ids:
        query = query.where(Notification.id.not_in(list(skip_ids)))
    rows = await session.execute(query)
    result = []
    for notification, secret in rows:
        session.expunge(notification)
        result.append((notification, secret))
    return result


async def any_due(direct: DirectPool, now: datetime) -> bool:
    """Whether any pending notification's time has come (the index on state and time)."""
    found = await direct.fetch(_ANY_DUE, ["pending", now])
    return bool(found)


_ANY_DUE = "SELECT 1 FROM notifications WHERE state = %s AND next_attempt_at <= %s LIMIT 1"


async def lease(session: AsyncSession, notification: Notification, until: datetime) -> bool:
    """Take this attempt: only one process delivers a given attempt."""
    result = await session.execute(
        update(Notification)
        .where(
            Notification.id == notification.id,
            Notification.state == "pending",
            Notification.next_attempt_at == notification.next_attempt_at,
        )
        .values(next_attempt_at=until)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def finish(session: AsyncSession, notification_id: int, **values: Any) -> None:
    await session.execute(
        update(Notification).where(Notification.id == notification_id).values(**values)
    )
