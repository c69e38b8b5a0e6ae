"""Proposed changes tried from outside, to measure their gain before anyone edits services/ or
libs/ (``python -m bench --experiment NAME[,NAME]``; benchmark launchers only).

Each experiment monkeypatches the running process the way the proposal in
docs/performance.md would change the code; results are labelled with the experiments applied.
None of this is a fix: the code change belongs in the file the proposal names.

- ``reset_none``: ``relay_core.db.engine.create_engine`` with ``pool_reset_on_return=None``
  (no ROLLBACK when a connection whose transaction was committed goes back to the pool);
- ``quiet_httpx``: the ``httpx`` logger at WARNING (``relay_core.logs.configure_logging``);
- ``async_deps``: ``relay_api.deps.get_runtime``, ``get_cache`` and ``require_json`` as
  ``async def`` (FastAPI runs plain ``def`` dependencies in a worker thread);
- ``core_insert``: ``relay_api.relay.repository.add`` as one Core INSERT instead of
  ``session.add`` + ``flush`` (the ORM unit of work for a single row).
"""

import logging
import os
from typing import Annotated, Any

KNOWN = ("reset_none", "quiet_httpx", "async_deps", "core_insert")


def enabled() -> set[str]:
    names = {n for n in os.environ.get("BENCH_EXPERIMENTS", "").split(",") if n}
    unknown = names - set(KNOWN)
    if unknown:
        raise SystemExit(f"unknown experiments {sorted(unknown)}; known: {', '.join(KNOWN)}")
    return names


def apply(names: set[str]) -> None:
    """Before the application is imported (``async_deps`` must precede the routes)."""
    if "reset_none" in names:
        _reset_none()
    if "quiet_httpx" in names:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if "async_deps" in names:
        _async_deps()
    if "core_insert" in names:
        _core_insert()


def _reset_none() -> None:
    from relay_core.db import engine as engine_mod

    original = engine_mod.create_async_engine

    def create_async_engine(url: Any, **kwargs: Any) -> Any:
        if not str(url).startswith("sqlite"):
            kwargs["pool_reset_on_return"] = None
        return original(url, **kwargs)

    engine_mod.create_async_engine = create_async_engine


def _async_deps() -> None:
    from fastapi import Request

    from relay_api import deps
    from relay_core.errors import UnsupportedMediaType

    runtime_dep = deps.RuntimeDep.__metadata__[0]  # type: ignore[attr-defined]
    cache_dep = deps.CacheDep.__metadata__[0]  # type: ignore[attr-defined]

    async def get_runtime(request: Request) -> Any:
        return request.app.state.runtime

    async def get_cache(runtime: Annotated[Any, runtime_dep]) -> Any:
        return runtime.cache

    async def require_json(request: Request) -> None:
        content_type = request.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise UnsupportedMediaType("Content-Type must be application/json")

    # Depends is a frozen dataclass; the routes are built from these same objects later.
    object.__setattr__(runtime_dep, "dependency", get_runtime)
    object.__setattr__(cache_dep, "dependency", get_cache)
    object.__setattr__(deps.JsonBody, "dependency", require_json)


def _core_insert() -> None:
    from sqlalchemy import insert
    from sqlalchemy.ext.asyncio import AsyncSession

    from relay_api.relay import repository
    from relay_core.db.models import Transaction

    table = Transaction.__table__

    async def add(session: AsyncSession, tx: Transaction) -> None:
        values = {}
        for column in table.columns:
            value = getattr(tx, column.key)
            if value is None and column.default is not None:
                arg = column.default.arg
                value = arg(None) if callable(arg) else arg
                setattr(tx, column.key, value)
            values[column.key] = value
        await session.execute(insert(Transaction).values(**values))

    repository.add = add
