"""Request dependencies, declared once and reached through ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.auth.service import Caller
from relay_api.runtime import Runtime
from relay_core.cache import StatusCache
from relay_core.errors import UnsupportedMediaType
from relay_core.queue import TransactionMessage


# Plain `def` dependencies would run in a worker thread; these do no I/O.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@dataclass
class UnitOfWork:
    """One session per request, committed in exactly one place; messages published and
    caches written only after that commit."""

    session: AsyncSession
    outbox: list[TransactionMessage] = field(default_factory=list)
    after_commit: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


async def get_uow(runtime: RuntimeDep) -> AsyncIterator[UnitOfWork]:
    async with runtime.sessions() as session:
        uow = UnitOfWork(session)
        try:
            yield uow
            await session.commit()
        except BaseException:
            await session.rollback()
            raise
    # Only now is the row durable; only now may the message leave.
    if uow.outbox:
        runtime.publisher.publish(uow.outbox)
    for action in uow.after_commit:
        await action()


# scope="function": the commit runs before the response is sent, so a 202 implies a commit.
UowDep = Annotated[UnitOfWork, Depends(get_uow, scope="function")]


async def get_caller(
    runtime: RuntimeDep, x_api_key: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Caller:
    return await runtime.authenticator.authenticate(x_api_key)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_cache(runtime: RuntimeDep) -> StatusCache | None:
    return runtime.cache


CacheDep = Annotated[StatusCache | None, Depends(get_cache)]


async def require_json(request: Request) -> None:
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")


JsonBody = Depends(require_json)
