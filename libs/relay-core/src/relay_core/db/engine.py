"""Engine and session factory. Built at service start-up, disposed at shutdown."""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.ext.asyncio import AsyncSession as AsyncSession

from relay_core.settings import InfraSettings


def create_engine(settings: InfraSettings) -> AsyncEngine:
    url = make_url(settings.async_database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": 30}, pool_pre_ping=False)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_async_engine(
        url,
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_pool_size // 2,
        pool_recycle=1800,
        pool_pre_ping=False,  # a ping per checkout would double the accept path round trips
        pool_timeout=settings.database_pool_timeout_s,
        connect_args={"connect_timeout": settings.database_connect_timeout_s},
    )


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
