"""SQL for client settings."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ApiClient


async def by_id(session: AsyncSession, client_id: str) -> ApiClient | None:
    return await session.get(ApiClient, client_id)


async def by_id_or_name(session: AsyncSession, ref: str) -> list[ApiClient]:
    """The client with this id, or every client with this name (names are not unique)."""
    rows = await session.execute(
        select(ApiClient).where(or_(ApiClient.id == ref, ApiClient.name == ref))
    )
    return list(rows.scalars())
