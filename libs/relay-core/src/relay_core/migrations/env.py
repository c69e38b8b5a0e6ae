"""Alembic environment: runs migrations through the same async engine the services use."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from sqlalchemy import JSON
from sqlalchemy.dialects.mysql import LONGTEXT
from sqlalchemy.engine import Connection

from relay_core.db.engine import create_engine
from relay_core.db.models import Base
from relay_core.settings import InfraSettings

config = context.config
target_metadata = Base.metadata


def _compare_type(
    ctx: Any, inspected_column: Any, metadata_column: Any, inspected_type: Any, metadata_type: Any
) -> bool | None:
    # MariaDB stores JSON as LONGTEXT with a json_valid() check; that is the same column.
    if isinstance(metadata_type, JSON) and isinstance(inspected_type, LONGTEXT):
        return False
    return None


def _database_url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return str(url)
    return InfraSettings().async_database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=_compare_type,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    settings = InfraSettings(database_url=_database_url())
    engine = create_engine(settings)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    existing = config.attributes.get("connection")
    if existing is not None:
        _run(existing)
        return
    asyncio.run(_run_async())


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; point DATABASE_URL at a database")
run_migrations_online()
