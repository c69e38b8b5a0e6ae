"""Accepting a batch: ``POST /api/v1/relay/batch``, up to 100 direct transactions written
together (one INSERT, one commit) or not at all. Each is judged as ``relay_api.relay.service``
judges one; the batch adds the item keys of its Idempotency-Key and the reservation of its
sum from the daily budgets."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError

from relay_api import metrics
from relay_api.auth.service import Caller
from relay_api.relay import repository, service
from relay_api.relay.requests import NewTransaction
from relay_core import policy, tracing
from relay_core.db.models import utcnow
from relay_core.errors import Conflict
from relay_core.fees import FeeOracle
from relay_core.queue import TransactionMessage
from relay_core.statuses import TxType
from relay_core.views import rfc3339

if TYPE_CHECKING:
    from relay_api.deps import UnitOfWork
    from relay_api.limits.budget import Budgets


def _item_keys(idempotency_key: str | None, count: int) -> list[str | None]:
    if idempotency_key is None:
        return [None] * count
    return [f"{idempotency_key} {index}" for index in range(count)]


async def accept_batch(
    uow: UnitOfWork,
    caller: Caller,
    batch: list[NewTransaction],
    idempotency_key: str | None,
    budgets: Budgets,
    fees: FeeOracle | None = None,
    forwarder_overhead: int = policy.FORWARDER_GAS_OVERHEAD,
    *,
    again: bool = True,
) -> list[service.Accepted]:
    """Accept ``batch`` as a whole: every row in one INSERT and one commit, or none. With an
    Idempotency-Key, item ``i`` is keyed ``"<key> <i>"`` (a space: never a single request's
    key): those accepted before are answered as they were, the others written. The spend
    policy judges each transaction (refused: 403 naming its index); the daily budgets are
    reserved for the sum."""
    caller.ensure_submits()
    keys = _item_keys(idempotency_key, len(batch))
    fingerprints = [service.fingerprint_of(new) for new in batch]
    answers: list[service.Accepted | None] = [None] * len(batch)
    if idempotency_key is not None:
        originals = await repository.by_idempotency_keys(uow.session, caller.id, keys)
        for index, key in enumerate(keys):
            original = originals.get(key)  # type: ignore[arg-type]
            if original is None:
                continue
            if original.request_fingerprint != fingerprints[index]:
                raise Conflict(
                    f"transactions.{index}: Idempotency-Key was already used with a different "
                    "batch; use a new key"
                )
            answers[index] = service.Accepted(
                original.id, rfc3339(original.created_at) or "", replayed=True
            )
    fresh = [index for index, answer in enumerate(answers) if answer is None]
    if not fresh:
        metrics.REPLAYED.inc()
        return [answer for answer in answers if answer is not None]
    prices = await service.fee_prices(caller, fees, (batch[index].request for index in fresh))
    spends = {}
    for index in fresh:
        new = batch[index]
        spend = service.spend_at(new.type, new.request, prices, forwarder_overhead)
        try:
            caller.policy.check(spend)
        except policy.PolicyRefused as exc:
            exc.detail = f"transactions.{index}: {exc.detail}"
            raise
        spends[index] = spend
    reserved = await budgets.reserve(
        lambda: uow.session,
        caller.id,
        caller.policy,
        sum(spend.value for spend in spends.values()),
        sum(spend.fee or 0 for spend in spends.values()),
    )
    now = utcnow()
    common = {"client_id": caller.id, "type": TxType.direct.value, "created_at": now}
    common.update(updated_at=now, spend_bucket=reserved.bucket)
    rows = repository.new_rows(
        common,
        [
            {
                "request": batch[i].request,
                "idempotency_key": keys[i],
                "request_fingerprint": fingerprints[i],
                "valid_until": batch[i].valid_until,
                "callback_url": batch[i].callback_url or caller.callback_url,
                "lane": batch[i].lane,
                "reserved_fee_wei": service.fee_reserved(caller, spends[i]),
            }
            for i in fresh
        ],
    )
    uow.on_rollback.append(reserved.give_back)
    try:
        committed = await repository.add(uow, rows)
    except IntegrityError:
        # The same batch sent twice at once: the other was written first. Ask again.
        await uow.rollback()
        reserved.give_back()
        uow.on_rollback.remove(reserved.give_back)
        if idempotency_key is None or not again:
            raise Conflict("conflicting transaction") from None
        return await accept_batch(
            uow, caller, batch, idempotency_key, budgets, fees, forwarder_overhead, again=False
        )
    if committed:
        uow.on_rollback.remove(reserved.give_back)
    created = rfc3339(now) or ""
    row_ids = [row["id"] for row in rows]
    lanes = [batch[index].lane for index in fresh]
    uow.outbox.extend(
        TransactionMessage.many(row_ids, TxType.direct, tracing.current(), lanes, timestamp=created)
    )
    for index, row_id in zip(fresh, row_ids, strict=True):
        answers[index] = service.Accepted(row_id, created, replayed=False)
    for lane, count in Counter(lanes).items():
        metrics.ACCEPTED.inc(TxType.direct.value, lane, amount=count)
    return [answer for answer in answers if answer is not None]
