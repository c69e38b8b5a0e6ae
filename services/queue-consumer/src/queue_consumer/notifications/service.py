"""Client notifications: every status change is POSTed to the client's callback URL, signed,
retried with back-off for a bounded time, in order per transaction, off the relay path.

Signed as Standard Webhooks (https://www.standardwebhooks.com): ``webhook-id`` (stable across
retries), ``webhook-timestamp`` (unix seconds) and ``webhook-signature: v1,<base64 HMAC-SHA256
of "<id>.<timestamp>.<body>">`` keyed with the client's ``whsec_`` secret, so a receiver
verifies with any Standard Webhooks library and rejects old timestamps. A notification is
never signed with an empty key: one whose client has no secret is abandoned.

Callbacks never reach inside (relay_core.netguard): the host is resolved at delivery, every
address it resolves to must be allowed, and the connection goes to those addresses (the
resolver that checked them is the one the connection uses); redirects are not followed.

Deliveries are fair: a pass does not wait for a slow endpoint, and a finished delivery starts
the next at once. A client whose endpoint has answered 2xx may have ``per_client`` deliveries
in flight; one that has not yet (new to this process) one at a time; one whose last delivery
failed (it hung past the timeout, refused, answered an error) one at a time, and only in a
small pool of its own (``concurrency // 4`` slots), until a delivery to it succeeds again. So
clients whose endpoints hang hold up neither each other's notifications for long nor anyone
else's: however many they are, the other clients keep the main pool.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import socket
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer import metrics
from queue_consumer.notifications import repository
from relay_core import apikeys, jsonutil
from relay_core.db.models import Notification, utcnow
from relay_core.netguard import AddressPolicy, RefusedDestination, sort_addresses
from relay_core.tasks import cancel_all
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks signature header value."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(apikeys.callback_secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class GuardedResolver(AbstractResolver):
    """Resolves a callback's host and lets the connection use the answer only if every
    address in it may be called."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        resolved = sort_addresses(self._policy, host, [a["host"] for a in answers])
        if resolved.refused:
            address, why = resolved.refused[0]
            raise RefusedDestination(f"{host} resolves to {why} ({address})")
        return answers

    async def close(self) -> None:
        await self._inner.close()


class Notifier:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        timeout_s: float,
        concurrency: int,
        max_age_s: float,
        backoff_cap_s: float,
        policy: AddressPolicy,
        per_client: int = 4,
        batch: int = 200,
        direct: DirectPool | None = None,
    ) -> None:
        self._sessions = sessions
        self._direct = direct
        self._policy = policy
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._limit = asyncio.Semaphore(concurrency)
        self._per_client = per_client
        self._max_age = timedelta(seconds=max_age_s)
        self._backoff_cap_s = backoff_cap_s
        self._lease = timedelta(seconds=timeout_s + 5)
        self._batch = batch
        self._busy: Counter[str] = Counter()  # deliveries in flight per client
        # Clients whose endpoint answered 2xx (may have per_client in flight), and those whose
        # last delivery failed (one at a time, in the small pool).
        self._proven: set[str] = set()
        self._failing: set[str] = set()
        self._failing_limit = asyncio.Semaphore(max(1, concurrency // 4))
        self._in_flight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._freed = asyncio.Event()  # a delivery ended: its client may take the next one
        self.delivered = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self._policy), use_dns_cache=False, limit=0
            )
            self._http = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._http

    async def aclose(self) -> None:
        await cancel_all(list(self._tasks))
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    async def run(self, interval_s: float) -> None:
        """Start what is due, again as soon as a delivery ends or ``interval_s`` passes."""
        while True:
            try:
                started = await self.run_once()
            except Exception as exc:
                log.warning("consumer.notify.failed", extra={"error": str(exc)[:200]})
                started = 0
            if not started:
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), interval_s)

    def _cap(self, client_id: str) -> int:
        if client_id in self._failing or client_id not in self._proven:
            return 1
        return self._per_client

    async def run_once(self) -> int:
        """Start the deliveries that are due, without waiting for them; returns how many."""
        now = utcnow()
        if self._direct is not None and not await repository.any_due(self._direct, now):
            # Most passes find nothing (most transactions have no callback): one indexed
            # read on a driver connection, not the ORM's query (a few ms of CPU, twice a
            # second, in every consumer).
            return 0
        full = {client for client, n in self._busy.items() if n >= self._cap(client)}
        async with self._sessions() as session:
            due = await repository.due(
                session, now, self._batch, skip_clients=full, skip_ids=self._in_flight
            )
        started = 0
        for notification, secret in due:
            if self._busy[notification.client_id] >= self._cap(notification.client_id):
                continue
            self._busy[notification.client_id] += 1
            self._in_flight.add(notification.id)
            task = asyncio.create_task(self._deliver(notification, secret))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started

    async def _deliver(self, notification: Notification, secret: str | None) -> None:
        pool = self._failing_limit if notification.client_id in self._failing else self._limit
        try:
            async with pool:
                await self._attempt(notification, secret)
        except Exception:
            log.exception("consumer.notify.error", extra={"notificationId": notification.id})
        finally:
            self._busy[notification.client_id] -= 1
            if self._busy[notification.client_id] <= 0:
                del self._busy[notification.client_id]
            self._in_flight.discard(notification.id)
            self._freed.set()

    async def _attempt(self, notification: Notification, secret: str | None) -> None:
        async with self._sessions() as session, session.begin():
            if not await repository.lease(session, notification, utcnow() + self._lease):
                return  # another process has this attempt
        if not secret:
            await self._abandon(notification, "the client has no callback secret")
            return
        body = jsonutil.dumps(notification.payload).encode()
        message_id = f"msg_{notification.id}"
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(secret, message_id, timestamp, body),
        }
        error: str | None = None
        try:
            self._policy.check_url(notification.url)
            async with self._client().post(
                notification.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                if not 200 <= response.status < 300:
                    error = f"HTTP {response.status}"
        except RefusedDestination as exc:
            await self._abandon(notification, f"refused destination: {exc}")
            return
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            refused = _refusal_in(exc)
            if refused is not None:
                await self._abandon(notification, f"refused destination: {refused}")
                return
            error = type(exc).__name__
        await self._record(notification, error)

    async def _record(self, notification: Notification, error: str | None) -> None:
        if error is None:
            self._proven.add(notification.client_id)
            self._failing.discard(notification.client_id)
        else:
            self._failing.add(notification.client_id)
            if len(self._failing) > 100_000:  # (bounded: forgetting only lets one try again)
                self._failing.clear()
        if len(self._proven) > 100_000:
            self._proven.clear()
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
                self.delivered += 1
                metrics.NOTIFICATIONS.inc("delivered")
                return
            if now - notification.created_at > self._max_age:
                await repository.finish(
                    session, notification.id, state="abandoned", attempts=attempts, last_error=error
                )
                metrics.NOTIFICATIONS.inc("abandoned")
                log.warning(
                    "consumer.notify.abandoned",
                    extra={"transactionId": notification.transaction_id, "error": error},
                )
                return
            metrics.NOTIFICATIONS.inc("failed")
            delay = min(self._backoff_cap_s, 2 ** min(attempts - 1, 16))
            await repository.finish(
                session,
                notification.id,
                attempts=attempts,
                last_error=error,
                next_attempt_at=now + timedelta(seconds=delay),
            )

    async def _abandon(self, notification: Notification, why: str) -> None:
        metrics.NOTIFICATIONS.inc("abandoned")
        log.warning(
            "consumer.notify.refused",
            extra={"transactionId": notification.transaction_id, "why": why[:300]},
        )
        async with self._sessions() as session, session.begin():
            await repository.finish(
                session,
                notification.id,
                state="abandoned",
                attempts=notification.attempts + 1,
                last_error=why[:1000],
            )


def _refusal_in(exc: BaseException) -> str | None:
    """aiohttp wraps what the resolver raised; find a refusal in the chain."""
    seen: Any = exc
    while seen is not None:
        if isinstance(seen, RefusedDestination):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None
