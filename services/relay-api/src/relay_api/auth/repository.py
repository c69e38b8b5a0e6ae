"""SQL for API clients."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ApiClient, utcnow


async def active_by_hash(session: AsyncSession, key_hash: str) -> ApiClient | None:
    return (
        await session.execute(
            select(ApiClient).where(ApiClient.key_hash == key_hash, ApiClient.revoked_at.is_(None))
        )
    ).scalar_one_or_none()


async def by_hash(session: AsyncSession, key_hash: str) -> ApiClient | None:
    return (
        await session.execute(select(ApiClient).where(ApiClient.key_hash == key_hash))
    ).scalar_one_or_none()


async def add(session: AsyncSession, client: ApiClient) -> None:
    session.add(client)
    await session.flush()


async def revoke(session: AsyncSession, client_id: str) -> bool:
    result = await session.execute(
        update(ApiClient)
        .where(ApiClient.id == client_id, ApiClient.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def all_clients(session: AsyncSession) -> list[ApiClient]:
    return list((await session.execute(select(ApiClient).order_by(ApiClient.created_at))).scalars())
