"""The clients: :class:`RelayClient` (blocking) and :class:`AsyncRelayClient` (asyncio), one
method per thing a client of Relay does. Both run the operations of ``flows.py``; they differ
only in how a request is sent and how a pause is made."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from relay_client import flows, gasless
from relay_client import transport as wire
from relay_client.flows import Call, Flow, Reply, Sleep
from relay_client.models import Accepted, CallbackSettings, CancelResult, SpeedUpResult, Status

T = TypeVar("T")


class RelayClient:
    """A blocking client. Use it as a context manager, or call :meth:`close`.

    ``base_url`` and ``api_key`` default to ``RELAY_API_URL`` (else http://127.0.0.1:8000)
    and ``RELAY_API_KEY``. A request that gets no answer, a 429 or a 502-504 is tried again
    ``retries`` times (honouring Retry-After); submissions carry an idempotency key (made
    for you unless you pass one), so a retry never submits twice. Refusals raise the
    :mod:`relay_client.errors` matching the status.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url, key = wire.settings(base_url, api_key)
        self.base_url = url
        self.retries = retries
        self._http = httpx.Client(
            base_url=url,
            headers=wire.headers(key, headers),
            timeout=timeout_s,
            transport=transport,
        )

    def __enter__(self) -> RelayClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def submit_direct(
        self,
        to: str,
        *,
        data: str = "0x",
        value: int | str = 0,
        gas_limit: int | str | None = None,
        speed: str | None = None,
        valid_until: str | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Submit a transaction for the relayer's wallet to send (202: made durable)."""
        return self._run(
            flows.submit_direct(
                to,
                data=data,
                value=value,
                gas_limit=gas_limit,
                speed=speed,
                valid_until=valid_until,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                retries=self.retries,
            )
        )

    def submit_batch(
        self, transactions: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[Accepted]:
        """Submit up to 100 direct transactions in one request, given as ``POST
        /relay/direct`` takes them (``{"to": ..., "value": 10**15, "speed": "fast"}``): all
        accepted (one :class:`Accepted` each, in order) or none (the error names the first
        transaction refused by its index). Safe to retry with the same key: each transaction
        is answered as it was accepted."""
        return self._run(flows.submit_batch(transactions, idempotency_key, self.retries))

    def submit_gasless(
        self,
        signer: gasless.Signer | str | bytes,
        to: str,
        *,
        data: str = "0x",
        value: int = 0,
        gas: int = 200_000,
        deadline: int | None = None,
        nonce: int | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        """Sign an ERC-2771 ForwardRequest with ``signer`` (an eth-account account or a
        private key) for the API's forwarder, and submit it: the relayer pays the gas, the
        target sees the signer as the caller. The nonce is fetched unless given; the deadline
        defaults to an hour from now."""
        return self._run(
            flows.submit_gasless(
                gasless.as_signer(signer),
                to,
                data=data,
                value=value,
                gas=gas,
                deadline=deadline,
                nonce=nonce,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                retries=self.retries,
            )
        )

    def gasless_nonce(self, address: str) -> int:
        """The forwarder's next nonce for ``address``."""
        return self._run(flows.gasless_nonce(address, self.retries))

    def status(self, transaction_id: str) -> Status:
        return self._run(flows.status(transaction_id, self.retries))

    def cancel(self, transaction_id: str) -> CancelResult:
        """Take back one of your transactions (:class:`CancelResult` says what was done);
        :class:`~relay_client.errors.Conflict` when it is mined or final already."""
        return self._run(flows.cancel(transaction_id, self.retries))

    def speed_up(self, transaction_id: str, speed: str) -> SpeedUpResult:
        """Send one of your transactions at ``speed`` (safeLow, average, fast, fastest): before
        it is sent, or replaced at the executor at its nonce (:class:`SpeedUpResult`);
        :class:`~relay_client.errors.Conflict` when it is being sent (ask again), mined or
        final."""
        return self._run(flows.speed_up(transaction_id, speed, self.retries))

    def wait(
        self,
        transaction_id: str,
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        max_poll_s: float = 5.0,
    ) -> Status:
        """Poll until the transaction is final (confirmed, failed, expired, canceled) and
        return it; :class:`~relay_client.errors.WaitTimeout` after ``timeout_s`` (120 s)."""
        return self._run(
            flows.wait(
                transaction_id,
                timeout_s=timeout_s,
                poll_s=poll_s,
                max_poll_s=max_poll_s,
                retries=self.retries,
            )
        )

    def transactions(self, *, status: str | None = None, page_size: int = 50) -> Iterator[Status]:
        """The caller's transactions, newest first, fetched a page at a time as you iterate."""
        cursor: str | None = None
        while True:
            page = self._run(flows.page(status, cursor, page_size, self.retries))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def set_callback(self, url: str | None, *, rotate_secret: bool = False) -> CallbackSettings:
        """Send this client's status notifications to ``url`` (None: stop them). With
        ``rotate_secret`` a new signing secret is made and returned, once."""
        return self._run(flows.set_callback(url, rotate_secret, self.retries))

    def _run(self, flow: Flow[T]) -> T:
        reply: Reply | None = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                reply = None
            else:
                reply = self._send(step)

    def _send(self, call: Call) -> Reply:
        try:
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as exc:
            return wire.failed(exc)
        return wire.reply(response)


class AsyncRelayClient:
    """The asyncio client: the same methods as :class:`RelayClient`, awaited (and
    ``transactions`` an async iterator). Use it as an async context manager, or await
    :meth:`close`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, key = wire.settings(base_url, api_key)
        self.base_url = url
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=url,
            headers=wire.headers(key, headers),
            timeout=timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncRelayClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def submit_direct(
        self,
        to: str,
        *,
        data: str = "0x",
        value: int | str = 0,
        gas_limit: int | str | None = None,
        speed: str | None = None,
        valid_until: str | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        return await self._run(
            flows.submit_direct(
                to,
                data=data,
                value=value,
                gas_limit=gas_limit,
                speed=speed,
                valid_until=valid_until,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                retries=self.retries,
            )
        )

    async def submit_batch(
        self, transactions: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[Accepted]:
        """As :meth:`RelayClient.submit_batch`."""
        return await self._run(flows.submit_batch(transactions, idempotency_key, self.retries))

    async def submit_gasless(
        self,
        signer: gasless.Signer | str | bytes,
        to: str,
        *,
        data: str = "0x",
        value: int = 0,
        gas: int = 200_000,
        deadline: int | None = None,
        nonce: int | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> Accepted:
        return await self._run(
            flows.submit_gasless(
                gasless.as_signer(signer),
                to,
                data=data,
                value=value,
                gas=gas,
                deadline=deadline,
                nonce=nonce,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                retries=self.retries,
            )
        )

    async def gasless_nonce(self, address: str) -> int:
        return await self._run(flows.gasless_nonce(address, self.retries))

    async def status(self, transaction_id: str) -> Status:
        return await self._run(flows.status(transaction_id, self.retries))

    async def cancel(self, transaction_id: str) -> CancelResult:
        """As :meth:`RelayClient.cancel`."""
        return await self._run(flows.cancel(transaction_id, self.retries))

    async def speed_up(self, transaction_id: str, speed: str) -> SpeedUpResult:
        """As :meth:`RelayClient.speed_up`."""
        return await self._run(flows.speed_up(transaction_id, speed, self.retries))

    async def wait(
        self,
        transaction_id: str,
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        max_poll_s: float = 5.0,
    ) -> Status:
        return await self._run(
            flows.wait(
                transaction_id,
                timeout_s=timeout_s,
                poll_s=poll_s,
                max_poll_s=max_poll_s,
                retries=self.retries,
            )
        )

    async def transactions(
        self, *, status: str | None = None, page_size: int = 50
    ) -> AsyncIterator[Status]:
        cursor: str | None = None
        while True:
            page = await self._run(flows.page(status, cursor, page_size, self.retries))
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def set_callback(
        self, url: str | None, *, rotate_secret: bool = False
    ) -> CallbackSettings:
        return await self._run(flows.set_callback(url, rotate_secret, self.retries))

    async def _run(self, flow: Flow[T]) -> T:
        reply: Reply | None = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                reply = None
            else:
                reply = await self._send(step)

    async def _send(self, call: Call) -> Reply:
        try:
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as exc:
            return wire.failed(exc)
        return wire.reply(response)
