"""What the API answers, as typed values. Wei amounts stay decimal strings or ints, never
floats; times are timezone-aware datetimes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

FINAL_STATUSES = frozenset({"confirmed", "failed", "expired", "canceled"})
STATUSES = ("pending", "processing", "submitted", "mined", *sorted(FINAL_STATUSES))
SPEEDS = ("safeLow", "average", "fast", "fastest")


def _time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class Accepted:
    """A submission the API has made durable (202)."""

    transaction_id: str
    status: str
    created_at: datetime
    location: str | None = None
    replayed: bool = False  # an idempotent replay of an earlier submission
    idempotency_key: str | None = None

    @classmethod
    def from_json(
        cls,
        body: dict[str, Any],
        *,
        location: str | None = None,
        replayed: bool = False,
        idempotency_key: str | None = None,
    ) -> Accepted:
        created = _time(body["createdAt"])
        assert created is not None
        return cls(
            transaction_id=body["transactionId"],
            status=body["status"],
            created_at=created,
            location=location,
            replayed=replayed,
            idempotency_key=idempotency_key,
        )


@dataclass(frozen=True, slots=True)
class Status:
    """A transaction as the API knows it now."""

    transaction_id: str
    type: str
    status: str
    hash: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    submitted_at: datetime | None
    confirmed_at: datetime | None
    # What it cost, from its receipt (None until Relay has read it, and from a server that
    # does not say): wei as decimal strings.
    block_number: int | None = None
    gas_used: int | None = None
    effective_gas_price: str | None = None
    fee_wei: str | None = None
    source: str | None = None  # which tier answered (X-Cache: hit, miss, upstream)

    @property
    def final(self) -> bool:
        """confirmed, failed, expired or canceled: it will not change again."""
        return self.status in FINAL_STATUSES

    @classmethod
    def from_json(cls, body: dict[str, Any], *, source: str | None = None) -> Status:
        created, updated = _time(body["createdAt"]), _time(body["updatedAt"])
        assert created is not None
        assert updated is not None
        return cls(
            transaction_id=body["transactionId"],
            type=body["type"],
            status=body["status"],
            hash=body.get("hash"),
            error_message=body.get("errorMessage"),
            created_at=created,
            updated_at=updated,
            submitted_at=_time(body.get("submittedAt")),
            confirmed_at=_time(body.get("confirmedAt")),
            block_number=body.get("blockNumber"),
            gas_used=body.get("gasUsed"),
            effective_gas_price=body.get("effectiveGasPrice"),
            fee_wei=body.get("feeWei"),
            source=source,
        )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the caller's transactions, newest first."""

    items: list[Status]
    next_cursor: str | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Page:
        return cls([Status.from_json(item) for item in body["items"]], body.get("nextCursor"))


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel did: ``done`` (canceled: it will never execute), ``requested`` (a consumer
    is sending it; it cancels it at the executor, or never sends it) or ``sent`` (the executor
    is replacing it with a no-op: ``canceled`` once that is mined, unless the original is mined
    first). ``status`` is the transaction's now; :meth:`RelayClient.wait` follows it."""

    transaction_id: str
    status: str
    cancel: str
    detail: str

    @property
    def done(self) -> bool:
        return self.cancel == "done"

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CancelResult:
        return cls(body["transactionId"], body["status"], body["cancel"], body["detail"])


@dataclass(frozen=True, slots=True)
class SpeedUpResult:
    """What a speed-up did: ``done`` (not sent yet: it will be sent at ``speed``) or ``sent``
    (the executor replaced it at its nonce with ``speed``; ``hash`` is its new hash, which the
    status follows)."""

    transaction_id: str
    status: str
    speed: str
    speed_up: str
    hash: str | None
    detail: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SpeedUpResult:
        return cls(
            body["transactionId"],
            body["status"],
            body["speed"],
            body["speedUp"],
            body.get("hash"),
            body["detail"],
        )


@dataclass(frozen=True, slots=True)
class CallbackSettings:
    """Where this client's notifications go; ``secret`` only when it was just made."""

    url: str | None
    secret: str | None


@dataclass(frozen=True, slots=True)
class Callback:
    """A verified status notification (:func:`relay_client.verify_callback`)."""

    id: str  # webhook-id: the same across retries of one notification
    timestamp: datetime
    payload: dict[str, Any]

    @property
    def event(self) -> str | None:
        """``transaction.status_changed``, ``transaction.cost_recorded`` or a cancel's step
        (``transaction.cancel_requested``, ``transaction.cancel_sent``,
        ``transaction.cancel_refused``)."""
        value = self.payload.get("event")
        return value if isinstance(value, str) else None

    @property
    def transaction_id(self) -> str | None:
        value = self.payload.get("transactionId")
        return value if isinstance(value, str) else None

    @property
    def status(self) -> str | None:
        value = self.payload.get("status")
        return value if isinstance(value, str) else None
