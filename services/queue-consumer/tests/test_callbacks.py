"""Callback delivery: Standard Webhooks signatures a client verifies with the library (and a
forgery fails), nothing delivered inside however the URL is spelt or what its name resolves
to, and a hanging endpoint holds up only its own client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from consumer_testkit import seed_rows, sync_engine, wait_until
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from queue_consumer.notifications.service import GuardedResolver, Notifier
from relay_core import apikeys
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import ApiClient, Notification, Transaction
from relay_core.db.transitions import transition
from relay_core.netguard import AddressPolicy, RefusedDestination
from relay_core.settings import InfraSettings

LOCAL = AddressPolicy(allow_loopback=True)


class _Endpoint(BaseHTTPRequestHandler):
    delay_s = 0.0
    received: list[tuple[float, dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay_s)
        self.received.append((time.monotonic(), dict(self.headers), body))
        with contextlib.suppress(OSError):  # the caller may have given up
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def endpoint(delay_s: float = 0.0) -> Iterator[tuple[str, type[_Endpoint]]]:
    handler = type("Endpoint", (_Endpoint,), {"received": [], "delay_s": delay_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", handler
    finally:
        server.shutdown()


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[Any]:
    engine = create_engine(InfraSettings(database_url=database_url))
    yield create_sessionmaker(engine)
    await engine.dispose()


async def _notify(database_url: str, sessions: Any, url: str, count: int) -> tuple[list[str], str]:
    """``count`` transactions of a new client whose callback is ``url``; each gets one status
    change, hence one notification. Returns the ids and the client's secret."""
    ids = seed_rows(database_url, count)
    secret = apikeys.generate_callback_secret()
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        client_id = conn.execute(
            select(Transaction.client_id).where(Transaction.id == ids[0])
        ).scalar_one()
        conn.execute(
            update(ApiClient)
            .where(ApiClient.id == client_id)
            .values(callback_url=url, callback_secret=secret)
        )
        conn.execute(update(Transaction).where(Transaction.id.in_(ids)).values(callback_url=url))
    engine.dispose()
    for tx_id in ids:
        async with sessions() as session, session.begin():
            tx = await session.get(Transaction, tx_id)
            assert await transition(session, tx, "processing", source="test")
    return ids, secret


@contextlib.asynccontextmanager
async def _delivering(notifier: Notifier) -> AsyncIterator[None]:
    """The notifier's passes, one after another as the consumer runs them, until the block ends."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            if not await notifier.run_once():
                await asyncio.sleep(0.1)

    runner = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        await runner
        await notifier.aclose()


def _notifier(sessions: Any, policy: AddressPolicy = LOCAL, **kwargs: Any) -> Notifier:
    values = {"timeout_s": 2.0, "concurrency": 16, "max_age_s": 600, "backoff_cap_s": 0.2}
    return Notifier(sessions, policy=policy, **(values | kwargs))


async def _states(sessions: Any) -> dict[int, tuple[str, str | None]]:
    async with sessions() as session:
        rows = await session.execute(select(Notification))
        return {n.id: (n.state, n.last_error) for n in rows.scalars()}


async def test_a_callback_verifies_with_the_standard_webhooks_library_and_a_forgery_does_not(
    database_url: str, sessions: Any
) -> None:
    with endpoint() as (url, handler):
        await _notify(database_url, sessions, url, 1)
        notifier = _notifier(sessions)
        try:
            await notifier.run_once()
            await wait_until(lambda: len(handler.received) == 1, 10, "the delivery")
        finally:
            await notifier.aclose()
    _, headers, body = handler.received[0]
    secret = (await _client_secrets(sessions))[0]
    payload = Webhook(secret).verify(body, headers)
    assert payload["status"] == "processing"
    assert headers["webhook-id"].startswith("msg_")
    tampered = json.dumps({**json.loads(body), "status": "confirmed"}).encode()
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(apikeys.generate_callback_secret()).verify(body, headers)  # someone else's


async def _client_secrets(sessions: Any) -> list[str]:
    async with sessions() as session:
        rows = await session.execute(
            select(ApiClient.callback_secret).where(ApiClient.callback_secret.is_not(None))
        )
        return [str(r[0]) for r in rows]


async def test_a_notification_is_never_sent_inside_however_its_url_is_written(
    database_url: str, sessions: Any
) -> None:
    with endpoint() as (url, handler):
        port = url.split(":")[2].split("/")[0]
        # The same loopback endpoint by literal address and by a name that resolves to it.
        for target in (url, f"http://localhost:{port}/hook", f"http://0x7f000001:{port}/hook"):
            await _notify(database_url, sessions, target, 1)
        notifier = _notifier(sessions, policy=AddressPolicy())  # loopback not allowed
        try:
            await notifier.run_once()

            async def all_abandoned() -> bool:
                return all(s == "abandoned" for s, _ in (await _states(sessions)).values())

            await wait_until(all_abandoned, 10, "every delivery refused")
        finally:
            await notifier.aclose()
    assert handler.received == []
    errors = [error or "" for _, error in (await _states(sessions)).values()]
    assert all(e.startswith("refused destination") for e in errors), errors
    assert any("localhost resolves to a loopback address" in e for e in errors), errors


async def test_a_name_resolving_to_a_private_address_is_refused_before_connecting() -> None:
    class Names:
        answers = {"internal.example": "10.1.2.3", "public.example": "93.184.216.34"}

        async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[Any]:
            return [{"hostname": host, "host": self.answers[host], "port": port}]

        async def close(self) -> None:
            pass

    resolver = GuardedResolver(AddressPolicy())
    resolver._inner = Names()  # type: ignore[assignment]
    assert (await resolver.resolve("public.example", 443))[0]["host"] == "93.184.216.34"
    with pytest.raises(RefusedDestination, match=r"internal\.example resolves to a private"):
        await resolver.resolve("internal.example", 443)


async def test_a_hanging_endpoint_does_not_hold_up_another_clients_callbacks(
    database_url: str, sessions: Any
) -> None:
    with endpoint(delay_s=8) as (slow_url, slow), endpoint() as (fast_url, fast):
        await _notify(database_url, sessions, slow_url, 10)  # ten deliveries that hang
        notifier = _notifier(sessions, timeout_s=6, per_client=2)
        async with _delivering(notifier):
            await asyncio.sleep(1)  # the slow client's deliveries are hanging by now
            started = time.monotonic()
            await _notify(database_url, sessions, fast_url, 3)
            await wait_until(lambda: len(fast.received) == 3, 15, "the other client's callbacks")
            waited = time.monotonic() - started
    assert waited < 3, f"the other client waited {waited:.1f} s behind a hanging endpoint"
    assert len(slow.received) <= 2  # never more than its share in flight


async def test_clients_whose_endpoints_hang_cannot_fill_the_delivery_slots_between_them(
    database_url: str, sessions: Any
) -> None:
    # Four clients whose endpoints hang, each with more notifications than it may send at
    # once: at four each they would fill the default sixteen slots for a whole timeout.
    with contextlib.ExitStack() as stack:
        hanging = [stack.enter_context(endpoint(delay_s=8)) for _ in range(4)]
        fast_url, fast = stack.enter_context(endpoint())
        for url, _ in hanging:
            await _notify(database_url, sessions, url, 10)
        notifier = _notifier(sessions, timeout_s=6, concurrency=16, per_client=4)
        async with _delivering(notifier):
            await asyncio.sleep(1)  # every hanging client's deliveries are under way
            started = time.monotonic()
            await _notify(database_url, sessions, fast_url, 3)
            await wait_until(lambda: len(fast.received) == 3, 20, "the healthy client's")
            waited = time.monotonic() - started
    assert waited < 3, f"a healthy client waited {waited:.1f} s behind four hanging ones"
