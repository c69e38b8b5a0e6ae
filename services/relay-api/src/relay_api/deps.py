"""Request dependencies, declared once and reached through ``Annotated`` aliases."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request, Security
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_api.auth.service import MISSING_KEY, Caller
from relay_api.limits.service import Limit
from relay_api.openapi import API_KEY
from relay_api.runtime import Runtime
from relay_core.errors import Forbidden, Unauthorized, UnsupportedMediaType
from relay_core.queue import TransactionMessage
from relay_wire.direct import DirectPool
from relay_wire.statements import DEADLOCK_TRIES, deadlocked

log = logging.getLogger(__name__)
T = TypeVar("T")


# Plain `def` dependencies would run in a worker thread; these do no I/O.
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class UnitOfWork:
    """One session per request, committed in exactly one place; messages published and
    caches written only after that commit. The session is opened on first use: a status
    answered from Redis never touches the database."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], direct: DirectPool | None = None
    ) -> None:
        self._sessions = sessions
        self._session: AsyncSession | None = None
        self.direct = direct
        self.outbox: list[TransactionMessage] = []
        self.after_commit: list[Callable[[], Awaitable[None]]] = []
        self.on_rollback: list[Callable[[], None]] = []  # undo what is not in the database

    @property
    def in_transaction(self) -> bool:
        """Whether the session has begun (a statement ran in it): then it must commit."""
        return self._session is not None and self._session.in_transaction()

    @property
    def session(self) -> AsyncSession:
        if self._session is None:
            self._session = self._sessions()
        return self._session

    async def commit(self) -> None:
        if self._session is not None:
            await self._session.commit()

    async def rollback(self) -> None:
        if self._session is not None:
            await self._session.rollback()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@contextlib.asynccontextmanager
async def unit_of_work(runtime: Runtime) -> AsyncIterator[UnitOfWork]:
    """The request's unit of work: committed (or rolled back) here and nowhere else; its
    messages published and its after-commit actions run only once the commit is done."""
    uow = UnitOfWork(runtime.sessions, runtime.direct)
    try:
        try:
            yield uow
        except BaseException:
            for undo in uow.on_rollback:
                undo()
            await uow.rollback()
            raise
        try:
            await uow.commit()
        except BaseException as exc:
            # Not undone: a commit that failed may still have been written (a lost
            # connection), and what is undone here is what keeps budgets strict. A deadlock's
            # victim was rolled back by the server: nothing of it was written.
            if deadlocked(exc):
                for undo in uow.on_rollback:
                    undo()
            await uow.rollback()
            raise
    finally:
        await uow.close()
    # Only now is the row durable; only now may the message leave.
    if uow.outbox:
        runtime.publisher.publish(uow.outbox)
    for action in uow.after_commit:
        await action()


async def in_unit_of_work(runtime: Runtime, work: Callable[[UnitOfWork], Awaitable[T]]) -> T:
    """``work(uow)`` in a :func:`unit_of_work`, done again in a new one when the database
    chose its transaction as a deadlock's victim (up to twice): the server rolled all of it
    back, and whatever it had taken outside the database was given back with that rollback
    (``on_rollback``), so nothing of the first try remains. Two writers of the transactions
    table can deadlock on its secondary indexes (a batch's INSERT and the outbox's UPDATE of
    ``enqueued_at``); without this the request would answer 503 for what the server settled
    in a millisecond. (The direct pool does its own single statements again first, so an
    INSERT that goes that way is sent at most nine times before the 503.)"""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            async with unit_of_work(runtime) as uow:
                return await work(uow)
        except DBAPIError as exc:
            if attempt == DEADLOCK_TRIES or not deadlocked(exc):
                raise
            log.info("api.deadlock_retried", extra={"attempt": attempt})
    raise AssertionError("unreachable")


async def get_uow(runtime: RuntimeDep) -> AsyncIterator[UnitOfWork]:
    async with unit_of_work(runtime) as uow:
        yield uow


# For routes that take the unit of work as a dependency. scope="function": the commit runs
# before the response is sent. The hot routes (accept, status) open it with ``unit_of_work``
# in their body instead: the same unit of work without the cost of a generator dependency.
UowDep = Annotated[UnitOfWork, Depends(get_uow, scope="function")]


async def get_caller(
    request: Request,
    runtime: RuntimeDep,
    x_api_key: Annotated[str | None, Security(API_KEY)] = None,
) -> Caller:
    """The calling client, within its rate limit (429 past it, before any work is done).
    Requests without a valid key are limited per source address, so guessing keys is slow;
    once an address is past that limit, a key this process has not verified is refused before
    the database is asked about it (a guess costs a hash, not a read): for the few seconds
    until the address's next token, that holds for a valid key not yet read by this process
    too. A valid key is never charged to its address, and neither is a request with no key at
    all: it guesses nothing and costs nothing to refuse, so it is always a 401."""
    caller = runtime.authenticator.known(x_api_key)
    if caller is None:
        if not x_api_key:
            raise Unauthorized(MISSING_KEY)
        settings = runtime.settings
        address = f"ip:{client_address(request, settings.trust_forwarded_for)}"
        held = runtime.limiter.refused(address)
        if held is not None:
            held.enforce(GUESSING)
        try:
            caller = await runtime.authenticator.authenticate(x_api_key)
        except Unauthorized:
            decision = await runtime.limiter.take(
                address, Limit(settings.unauthenticated_rate_per_s, settings.unauthenticated_burst)
            )
            decision.enforce(GUESSING)
            raise
    limit = caller.limit or runtime.default_limit
    (await runtime.limiter.take(caller.id, limit)).enforce(f"client {caller.name}")
    return caller


GUESSING = "requests without a valid API key from this address"


def client_address(request: Request, trust_forwarded_for: bool) -> str:
    """The caller's address: the last X-Forwarded-For entry when a trusted load balancer
    appends it (earlier entries are the client's own say), else the peer."""
    if trust_forwarded_for:
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded:
            return forwarded.rsplit(",", 1)[-1].strip()
    return request.client.host if request.client else "unknown"


CallerDep = Annotated[Caller, Depends(get_caller)]


def require_admin(caller: Caller) -> None:
    if not caller.is_admin:
        raise Forbidden("this endpoint needs an admin key (relay keys create --role admin)")


def require_operator(caller: Caller) -> None:
    """An operator's or an admin's key."""
    if not caller.manages:
        raise Forbidden(
            "this endpoint needs an operator or admin key (relay keys create --role operator)"
        )


async def require_json(request: Request) -> None:
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("Content-Type must be application/json")


JsonBody = Depends(require_json)
