"""SQL for client settings."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ApiClient


async def by_id(session: AsyncSession, client_id: str) -> ApiClient | None:
    return await session.get(ApiClient, client_id)
