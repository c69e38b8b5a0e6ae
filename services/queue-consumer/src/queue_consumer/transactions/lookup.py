"""The in-doubt lookup: did an earlier attempt create a transaction at the executor?

The executor has no idempotency key, so an attempt whose call ended without an answer (a
timeout, a 5xx, a dropped connection, a crash after the call) leaves the row *in doubt*: its
claim carries the stamp ``submit_started_at`` and no executor id. Before anything is sent
again, the executor's transactions are read back and matched on (to, data, value).

Complete or nothing
    The list is newest first by ``created_at``. A lookup reads pages until it has seen a
    transaction created before its horizon (the stamp minus ``_CLOCK_SKEW``, minus
    ``_ORDER_SLACK``), or the end of the list (a short page that, by the list's
    ``total_items``, is the last). Only then is "no match" an answer. If it cannot get there
    (the page limit or the time limit is reached, a call fails, the circuit is open, a page is
    short before the end, the list turns out not to be newest first) the lookup is
    *incomplete*: the attempt stays in doubt and is looked up again later; an incomplete read
    never leads to a resubmission.

    Reading page by page while the executor takes new transactions is still complete: a new
    transaction goes to the front and pushes the others towards later pages, so a transaction
    may be seen twice but never skipped. The executor deletes final transactions only
    ``executor_retention_s`` after they ended; those were created long before any stamp that
    is still looked up (an attempt older than 3/4 of the retention is never resolved by
    lookup), so no deletion shifts a page under the part of the list being read.

Which match is ours
    A match has the payload's (to, data, value) and, where the executor reports them, its
    speed and gas limit. The stamp is written before the call, so the attempt's transaction
    (if any) was created after it. Adoption waits until the attempt has *settled*: its call
    either answered or can no longer reach the executor (see ``stages.submitting``), so
    whatever it created exists by then. The row then takes the *earliest* match created at or
    after its horizon that no other row holds, and writes it with a compare-and-set under a
    unique index on ``executor_tx_id``: if another row took it meanwhile, the write fails and
    this row decides afresh. With no free match, nothing it sent exists and it submits again.

    Several rows may carry the same (to, data, value); their executor transactions are then
    interchangeable, and what must hold is that each row gets exactly one and no transaction
    is left over. A row's own transaction lies within its view (created after its horizon);
    views of earlier stamps contain those of later ones, so a row that takes someone else's
    transaction leaves its own to a row that can see it. Taking the earliest free one keeps
    that true in any order of decisions (``tests/test_lookup.py`` checks it against random
    interleavings).

Lookups are shared: one scan of the list serves every lookup waiting when it starts, reading
back to the oldest horizon among them, so a burst of in-doubt rows (an executor that hung)
costs one read of the list, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from queue_consumer.circuit import CircuitOpen, ExecutorGuard
from relay_core.executor import ExecutorClient, ExecutorError, ExecutorTx
from relay_core.tasks import cancel_all

log = logging.getLogger(__name__)

# Executors' clocks and ours differ a little; look a bit further back than the stamp.
_CLOCK_SKEW = timedelta(seconds=5)
# Transactions created at nearly the same moment may be listed a little out of order (the
# relayer-stub lists them as their sends committed); more than this and the list is not one to
# conclude anything from.
_ORDER_SLACK = timedelta(seconds=1)

_Key = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Lookup:
    """``complete``: the list was read back past the horizon, so ``matches`` is every
    transaction the executor has for this payload since then. Otherwise ``reason`` says why
    not, and nothing may be concluded."""

    complete: bool
    matches: tuple[ExecutorTx, ...] = ()
    reason: str = ""


def payload_key(payload: dict[str, Any]) -> _Key:
    return (str(payload["to"]).lower(), _hex(payload.get("data")), int(payload.get("value") or 0))


def _compatible(item: ExecutorTx, request: _Request) -> bool:
    """Beyond (to, data, value): what the executor reports back of what we sent. Two rows'
    payloads that differ here are not interchangeable (one's gas limit is not the other's)."""
    if request.speed is not None and item.speed is not None and item.speed != request.speed:
        return False
    return request.gas_limit is None or item.gas_limit in (None, request.gas_limit)


def _item_key(item: ExecutorTx) -> _Key:
    return ((item.to or "").lower(), _hex(item.data), item.value or 0)


def _hex(data: Any) -> str:
    text = str(data or "").lower()
    return text if text.startswith("0x") else "0x" + text


def choose(matches: Iterable[ExecutorTx], taken: Collection[str]) -> ExecutorTx | None:
    """The earliest match no other row holds (None: the attempt created nothing)."""
    free = [match for match in matches if match.id not in taken]
    if not free:
        return None
    return min(free, key=lambda m: (m.created_at or datetime.max, m.id))


@dataclass(eq=False)
class _Request:
    key: _Key
    horizon: datetime
    future: asyncio.Future[Lookup]
    speed: str | None = None
    gas_limit: int | None = None
    matches: dict[str, ExecutorTx] = field(default_factory=dict)


class ExecutorLookup:
    def __init__(
        self,
        executor: ExecutorClient,
        guard: ExecutorGuard,
        *,
        page_size: int = 100,
        max_pages: int = 500,
        timeout_s: float = 10.0,
        deadline_s: float = 45.0,
    ) -> None:
        self._executor = executor
        self._guard = guard
        self._page_size = page_size
        self._max_pages = max_pages
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._waiting: list[_Request] = []
        self._scanner: asyncio.Task[None] | None = None
        self.scans = 0
        self.pages_read = 0
        self.incomplete = 0

    async def find(self, payload: dict[str, Any], since: datetime) -> Lookup:
        """Every executor transaction for ``payload`` created since ``since`` (minus skew)."""
        gas_limit = payload.get("gas_limit")
        request = _Request(
            payload_key(payload),
            since - _CLOCK_SKEW,
            asyncio.get_running_loop().create_future(),
            speed=payload.get("speed"),
            gas_limit=int(gas_limit) if gas_limit is not None else None,
        )
        self._waiting.append(request)
        if self._scanner is None or self._scanner.done():
            self._scanner = asyncio.create_task(self._scan_while_waiting(), name="in-doubt-scan")
        return await asyncio.shield(request.future)

    async def aclose(self) -> None:
        if self._scanner is not None:
            await cancel_all([self._scanner])
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner

    async def _scan_while_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._scan(batch)
            except asyncio.CancelledError:
                _settle(batch, "lookup cancelled")
                raise
            except Exception as exc:  # a bug must not strand the waiters
                log.exception("consumer.lookup.error")
                _settle(batch, f"{type(exc).__name__}: {exc}")

    async def _scan(self, batch: list[_Request]) -> None:
        self.scans += 1
        by_key: dict[_Key, list[_Request]] = {}
        for request in batch:
            by_key.setdefault(request.key, []).append(request)
        open_requests = set(batch)
        deadline = time.monotonic() + self._deadline_s
        previous: datetime | None = None  # created_at of the last new item, in list order
        seen: set[str] = set()
        for page in range(1, self._max_pages + 1):
            if time.monotonic() > deadline:
                self._incomplete(open_requests, f"gave up after {self._deadline_s:.0f} s")
                return
            try:
                async with self._guard.slot() as permit:
                    listed = await permit.run(
                        self._executor.list_page(page, per_page=self._page_size),
                        timeout_s=self._timeout_s,
                    )
            except (ExecutorError, CircuitOpen, TimeoutError) as exc:
                self._incomplete(open_requests, f"listing page {page} failed: {exc}")
                return
            self.pages_read += 1
            items = listed.items
            for item in items:
                # A transaction seen on an earlier page and pushed down by newer ones comes
                # again; any other one newer than its predecessor means the list is unordered.
                if item.created_at is not None and item.id not in seen:
                    if previous is not None and item.created_at > previous + _ORDER_SLACK:
                        self._incomplete(open_requests, "the executor's list is not newest first")
                        return
                    previous = item.created_at
                seen.add(item.id)
                for request in by_key.get(_item_key(item), ()):
                    if _compatible(item, request) and (
                        item.created_at is None or item.created_at >= request.horizon
                    ):
                        request.matches[item.id] = item
            oldest = min((i.created_at for i in items if i.created_at is not None), default=None)
            short = len(items) < self._page_size
            reached = (page - 1) * self._page_size + len(items)
            if short and listed.total_items is not None and reached < listed.total_items:
                self._incomplete(
                    open_requests,
                    f"page {page} held {len(items)} of {self._page_size} transactions before "
                    f"the end of the list ({listed.total_items})",
                )
                return
            for request in list(open_requests):
                if short or (oldest is not None and oldest < request.horizon - _ORDER_SLACK):
                    open_requests.discard(request)
                    _answer(request, Lookup(True, tuple(request.matches.values())))
            if not open_requests:
                return
        self._incomplete(
            open_requests,
            f"read {self._max_pages} pages of {self._page_size} without reaching the attempt's "
            "start",
        )

    def _incomplete(self, requests: set[_Request], reason: str) -> None:
        self.incomplete += len(requests)
        log.warning("consumer.lookup.incomplete", extra={"waiting": len(requests), "why": reason})
        _settle(requests, reason)


def _answer(request: _Request, lookup: Lookup) -> None:
    if not request.future.done():
        request.future.set_result(lookup)


def _settle(requests: Iterable[_Request], reason: str) -> None:
    for request in requests:
        _answer(request, Lookup(False, reason=reason))
