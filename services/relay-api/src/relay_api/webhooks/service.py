"""Executor webhooks: verify, deduplicate, map, apply forward-only."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_api.webhooks import repository
from relay_core import jsonutil
from relay_core.db.models import Transaction, utcnow
from relay_core.errors import BadRequest, NotFound, Unauthorized
from relay_core.tracking import UpstreamView, apply_upstream, interpret

log = logging.getLogger(__name__)


async def prune(
    sessions: async_sessionmaker[AsyncSession], retention_s: float, interval_s: float = 60.0
) -> None:
    """Background loop in the API process: receipts older than ``retention_s`` are forgotten
    (a webhook is retried within minutes; one replayed later is applied again, and its status
    only ever moves forward)."""
    while True:
        try:
            before = utcnow() - timedelta(seconds=retention_s)
            while True:
                async with sessions() as session, session.begin():
                    forgotten = await repository.forget_receipts(session, before, 5000)
                if forgotten < 5000:
                    break
        except Exception as exc:  # the database is down: the next pass
            log.warning("api.webhooks.prune_failed", extra={"error": str(exc)[:200]})
        await asyncio.sleep(interval_s)


def verify(raw: bytes, signature: str | None, key: str | None) -> None:
    """X-Signature is base64 HMAC-SHA256 of the exact body bytes (OZ Relayer's scheme)."""
    if not key or not signature:
        raise Unauthorized("missing or unverifiable X-Signature")
    expected = base64.b64encode(hmac.new(key.encode(), raw, hashlib.sha256).digest()).decode()
    if not hmac.compare_digest(expected.encode(), signature.strip().encode()):
        raise Unauthorized("invalid X-Signature")


def parse(raw: bytes) -> dict[str, Any]:
    try:
        body = jsonutil.loads(raw)
    except ValueError as exc:
        raise BadRequest("body is not JSON") from exc
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise BadRequest("id: a webhook needs an id")
    return body


def transaction_update(body: dict[str, Any]) -> tuple[str, str, UpstreamView] | None:
    """(webhook id, executor id, what it says) of a transaction update; None for another
    event (ignored); 400 for an update Relay cannot read."""
    if body.get("event") != "transaction_update":
        return None
    payload = body.get("payload") or {}
    executor_id = payload.get("id")
    view = interpret(payload)
    if not isinstance(executor_id, str) or view is None:
        raise BadRequest("payload: not a transaction update Relay understands")
    return str(body["id"])[:64], executor_id, view


async def apply(
    session: AsyncSession, webhook_id: str, executor_id: str, view: UpstreamView
) -> tuple[str, Transaction | None]:
    """One webhook through a Session (where relay_api.webhooks.batch cannot run: no driver
    connections, SQLite). Returns (outcome, row changed). The caller's unit of work commits."""
    try:
        await repository.record_receipt(session, webhook_id)
    except IntegrityError:
        await session.rollback()
        return "duplicate", None
    for _ in range(3):
        tx = await repository.by_executor_id(session, executor_id)
        if tx is None:
            # The consumer may not have recorded the executor's id yet: refuse (nothing is
            # kept, not even the receipt) so the executor retries; the tracker covers the rest.
            raise NotFound("no transaction with this executor id (yet)")
        if await apply_upstream(session, tx, view, source="webhook"):
            return "applied", tx
        session.expire_all()
    raise BadRequest("the transaction kept changing; retry")
