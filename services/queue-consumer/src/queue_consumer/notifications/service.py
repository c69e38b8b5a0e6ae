"""Client notifications: every status change is POSTed to the client's callback URL, signed,
retried with back-off for a bounded time, in order per transaction, off the relay path.

Signature (Stripe-style): ``Relay-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` where the
HMAC is keyed with the client's callback secret over ``"<t>." + body``. Receivers should check
the HMAC in constant time and reject old ``t`` values to stop replays.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.notifications import repository
from relay_core import jsonutil
from relay_core.db.models import Notification, utcnow

log = logging.getLogger(__name__)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


class Notifier:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        timeout_s: float,
        concurrency: int,
        max_age_s: float,
        backoff_cap_s: float,
        batch: int = 200,
    ) -> None:
        self._sessions = sessions
        self._http = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)
        self._limit = asyncio.Semaphore(concurrency)
        self._max_age = timedelta(seconds=max_age_s)
        self._backoff_cap_s = backoff_cap_s
        self._lease = timedelta(seconds=timeout_s + 5)
        self._batch = batch

    async def aclose(self) -> None:
        await self._http.aclose()

    async def run_once(self) -> int:
        now = utcnow()
        async with self._sessions() as session:
            due = await repository.due(session, now, self._batch)
        results = await asyncio.gather(*(self._deliver(n, secret) for n, secret in due))
        return sum(results)

    async def _deliver(self, notification: Notification, secret: str) -> int:
        async with self._limit:
            async with self._sessions() as session, session.begin():
                if not await repository.lease(session, notification, utcnow() + self._lease):
                    return 0  # another process has this attempt
            body = jsonutil.dumps(notification.payload).encode()
            headers = {
                "Content-Type": "application/json",
                "Relay-Signature": sign(secret, int(time.time()), body),
                "Relay-Event-Id": str(notification.id),
            }
            error: str | None = None
            try:
                response = await self._http.post(notification.url, content=body, headers=headers)
                if not 200 <= response.status_code < 300:
                    error = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            attempts = notification.attempts + 1
            now = utcnow()
            async with self._sessions() as session, session.begin():
                if error is None:
                    await repository.finish(
                        session,
                        notification.id,
                        state="delivered",
                        attempts=attempts,
                        delivered_at=now,
                        last_error=None,
                    )
                    return 1
                if now - notification.created_at > self._max_age:
                    await repository.finish(
                        session,
                        notification.id,
                        state="abandoned",
                        attempts=attempts,
                        last_error=error,
                    )
                    log.warning(
                        "consumer.notify.abandoned",
                        extra={"transactionId": notification.transaction_id, "error": error},
                    )
                    return 0
                delay = min(self._backoff_cap_s, 2 ** min(attempts - 1, 16))
                await repository.finish(
                    session,
                    notification.id,
                    attempts=attempts,
                    last_error=error,
                    next_attempt_at=now + timedelta(seconds=delay),
                )
            return 0
