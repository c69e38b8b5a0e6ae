"""Accepting transactions and answering status.

Accept: validate → one INSERT → commit (in the request's unit of work) → 202; the SQS message
is handed to the publisher only after the commit. Idempotency and the gasless nonce-in-flight
rule are enforced by unique indexes, so concurrent duplicates cannot both get in.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from relay_api import metrics
from relay_api.auth.service import Caller
from relay_api.relay import repository
from relay_api.relay.refresh import Refresher
from relay_api.relay.requests import NewTransaction
from relay_core import jsonutil, policy, tracing
from relay_core.cache import StatusCache
from relay_core.db.models import Transaction, utcnow
from relay_core.errors import BadRequest, Conflict, NotFound
from relay_core.executor import ExecutorTx
from relay_core.fees import FeeOracle
from relay_core.queue import TransactionMessage
from relay_core.statuses import TxStatus, TxType, is_terminal
from relay_core.tracking import interpret
from relay_core.views import rfc3339, status_entry

if TYPE_CHECKING:
    from relay_api.deps import UnitOfWork
    from relay_api.limits.budget import Budgets


@dataclass(frozen=True, slots=True)
class Accepted:
    transaction_id: str
    created_at: str
    replayed: bool

    def body(self) -> dict[str, str]:
        return {
            "transactionId": self.transaction_id,
            "status": TxStatus.pending.value,
            "createdAt": self.created_at,
        }


async def accept(
    uow: UnitOfWork,
    caller: Caller,
    new: NewTransaction,
    idempotency_key: str | None,
    budgets: Budgets,
    fees: FeeOracle | None = None,
    forwarder_overhead: int = policy.FORWARDER_GAS_OVERHEAD,
) -> Accepted:
    """Insert the row; the unit of work commits and then publishes its outbox. The client's
    spend policy is checked first, and its daily budgets reserved (relay_core.policy,
    relay_api.limits.budget): given back if the row is not committed. A client with a fee
    rule has the most its transaction can cost worked out first (``fees``)."""
    caller.ensure_submits()
    fingerprint = fingerprint_of(new)
    now = utcnow()
    spend = await spend_of(caller, new.type, new.request, fees, forwarder_overhead)
    try:
        caller.policy.check(spend)
        reserved = await budgets.reserve(
            lambda: uow.session, caller.id, caller.policy, spend.value, spend.fee or 0
        )
    except policy.PolicyRefused:
        # A retry of a request accepted before its policy changed (or its budget ran out,
        # by this very request) is answered as it was then.
        if idempotency_key is not None:
            await uow.rollback()
            replayed = await _replay(uow.session, caller, idempotency_key, fingerprint)
            if replayed is not None:
                return replayed
        raise
    row = _row(caller, new, idempotency_key, fingerprint, now, reserved.bucket, spend)
    give_back = reserved.give_back
    uow.on_rollback.append(give_back)
    try:
        committed = await repository.add(uow, [row])
    except IntegrityError:
        await uow.rollback()
        give_back()
        uow.on_rollback.remove(give_back)
        return await _resolve_duplicate(uow.session, caller, new, idempotency_key, fingerprint)
    if committed:  # durable already: nothing left for a rollback to give back
        uow.on_rollback.remove(give_back)
    tx_id = row["id"]
    uow.outbox.append(TransactionMessage.new(tx_id, new.type, tracing.current(), new.lane))
    metrics.ACCEPTED.inc(new.type.value, new.lane)
    return Accepted(transaction_id=tx_id, created_at=rfc3339(now) or "", replayed=False)


def fingerprint_of(new: NewTransaction) -> str:
    return jsonutil.fingerprint(
        {"type": new.type.value, "request": new.request, "callbackUrl": new.callback_url}
    )


async def spend_of(
    caller: Caller,
    tx_type: TxType | str,
    request: dict[str, Any],
    fees: FeeOracle | None,
    forwarder_overhead: int,
) -> policy.Spend:
    """What a transaction of ``tx_type`` asking ``request`` asks of the wallet; with a fee
    rule, at the highest price of its speed (a gasless request's is fast unless sped up)."""
    prices = await fee_prices(caller, fees, [request])
    return spend_at(tx_type, request, prices, forwarder_overhead)


async def fee_prices(
    caller: Caller, fees: FeeOracle | None, requests: Iterable[dict[str, Any]]
) -> dict[str, int | None] | None:
    """The highest price of a unit of gas at each speed ``requests`` ask for, asked once per
    speed; None when no rule of the caller's prices fees (then none is asked)."""
    if fees is None or not caller.policy.prices_fees:
        return None
    prices: dict[str, int | None] = {}
    for request in requests:
        speed = request.get("speed") or "fast"
        if speed not in prices:
            prices[speed] = await fees.max_fee_per_gas(speed)
    return prices


def spend_at(
    tx_type: TxType | str,
    request: dict[str, Any],
    prices: dict[str, int | None] | None,
    forwarder_overhead: int,
) -> policy.Spend:
    """:func:`spend_of` with the prices asked already (:func:`fee_prices`)."""
    fee_per_gas = None if prices is None else prices[request.get("speed") or "fast"]
    return policy.Spend.of(
        tx_type, request, fee_per_gas=fee_per_gas, forwarder_overhead=forwarder_overhead
    )


def _row(
    caller: Caller,
    new: NewTransaction,
    idempotency_key: str | None,
    fingerprint: str,
    now: datetime,
    bucket: datetime | None,
    spend: policy.Spend,
) -> dict[str, Any]:
    return repository.new_row(
        client_id=caller.id,
        type=new.type.value,
        status=TxStatus.pending.value,
        request=new.request,
        idempotency_key=idempotency_key,
        request_fingerprint=fingerprint,
        inflight_key=new.inflight_key,
        valid_until=new.valid_until,
        callback_url=new.callback_url or caller.callback_url,
        lane=new.lane,
        created_at=now,
        updated_at=now,
        spend_bucket=bucket,
        reserved_fee_wei=fee_reserved(caller, spend),
    )


def fee_reserved(caller: Caller, spend: policy.Spend) -> str | None:
    """The fee held on the row until its receipt settles it (a client with a fee budget)."""
    return str(spend.fee) if spend.fee and caller.policy.daily_fee_wei else None


async def _resolve_duplicate(
    session: AsyncSession,
    caller: Caller,
    new: NewTransaction,
    idempotency_key: str | None,
    fingerprint: str,
) -> Accepted:
    if idempotency_key is not None:
        replayed = await _replay(session, caller, idempotency_key, fingerprint)
        if replayed is not None:
            return replayed
    if new.inflight_key is not None:
        raise Conflict("request.nonce: a transaction with this from and nonce is already in flight")
    raise Conflict("conflicting transaction")


async def _replay(
    session: AsyncSession, caller: Caller, idempotency_key: str, fingerprint: str
) -> Accepted | None:
    """The original answer to a request made again with its Idempotency-Key; None if there
    was no such request; 409 if the key came with another body."""
    original = await repository.by_idempotency_key(session, caller.id, idempotency_key)
    if original is None:
        return None
    if original.request_fingerprint != fingerprint:
        raise Conflict("Idempotency-Key was already used with a different request; use a new key")
    metrics.REPLAYED.inc()
    return Accepted(
        transaction_id=original.id, created_at=rfc3339(original.created_at) or "", replayed=True
    )


async def cached_status(
    cache: StatusCache | None, caller: Caller, transaction_id: str
) -> dict[str, Any] | None:
    """The caller's view from Redis (tier ``hit``), or None: then :func:`status` answers."""
    if cache is None:
        return None
    cached = await cache.get_quietly(transaction_id)
    if cached is None:
        return None
    _, entry = cached
    _check_owner(caller, entry["clientId"])
    return entry


async def status(
    session: AsyncSession,
    cache: StatusCache | None,
    refresher: Refresher | None,
    caller: Caller,
    transaction_id: str,
) -> tuple[dict[str, Any], str]:
    """The caller's view of a transaction Redis did not have, and the tier that answered it:
    ``miss`` (MySQL, which backfills Redis) or ``upstream`` (refreshed from the executor
    because the stored status was not final and not fresh)."""
    tx = await repository.by_id(session, transaction_id)
    if tx is None:
        if caller.manages and refresher is not None:
            found = await refresher.lookup(transaction_id)
            if found is not None:
                return executor_entry(found), "upstream"
        raise NotFound("no transaction with this id")
    _check_owner(caller, tx.client_id)
    if refresher is not None and refresher.due(tx):
        refreshed = await refresher.refresh(tx)
        if refreshed is not None:
            return status_entry(refreshed), "upstream"
    entry = status_entry(tx)
    if cache is not None:
        await cache.put_quietly(tx.id, tx.version, entry, terminal=is_terminal(tx.status))
    return entry, "miss"


def executor_entry(found: ExecutorTx) -> dict[str, Any]:
    """An executor record Relay has no row for (admin look-ups only)."""
    view = interpret(found.raw)
    return {
        "transactionId": found.id,
        "clientId": None,
        "type": None,
        "status": view.status.value if view else found.status,
        "hash": found.hash,
        "errorMessage": view.reason if view else found.status_reason,
        "createdAt": rfc3339(found.created_at),
        "updatedAt": None,
        "submittedAt": None,
        "confirmedAt": rfc3339(view.confirmed_at) if view else None,
    }


async def list_transactions(
    session: AsyncSession,
    caller: Caller,
    status_filter: TxStatus | None,
    cursor: str | None,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """The caller's own transactions, newest first; the cursor is opaque to clients."""
    after = _decode_cursor(cursor) if cursor else None
    rows = await repository.page(
        session, caller.id, status_filter.value if status_filter else None, after, limit + 1
    )
    items = [public(status_entry(tx)) for tx in rows[:limit]]
    next_cursor = _encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return items, next_cursor


def _encode_cursor(tx: Transaction) -> str:
    raw = f"{tx.created_at.isoformat()}|{tx.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, tx_id = raw.partition("|")
        return datetime.fromisoformat(created), str(uuid.UUID(tx_id))
    except ValueError as exc:
        raise BadRequest("cursor: not a cursor this API returned") from exc


def _check_owner(caller: Caller, owner_id: str) -> None:
    # Another client's transaction is indistinguishable from one that does not exist.
    if owner_id != caller.id and not caller.manages:
        raise NotFound("no transaction with this id")


def public(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "clientId"}
