"""The transaction record, as the stub keeps it in memory and in the ledger."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    pending = "pending"
    sent = "sent"
    submitted = "submitted"
    mined = "mined"
    confirmed = "confirmed"
    failed = "failed"
    canceled = "canceled"
    expired = "expired"


FINAL_STATUSES = frozenset({Status.confirmed, Status.failed, Status.canceled, Status.expired})
CANCELABLE_STATUSES = (Status.pending, Status.sent, Status.submitted)


# Ids and fake hashes need to be unique, not unpredictable: a seeded-once Mersenne Twister is
# several times cheaper than os.urandom per call, which matters at thousands of sends a second.
_ids = random.Random()


def new_uuid4() -> str:
    return str(uuid.UUID(int=_ids.getrandbits(128), version=4))


def random_hex(n_bytes: int) -> str:
    return f"{_ids.getrandbits(8 * n_bytes):0{2 * n_bytes}x}"


def now_rfc3339() -> str:
    """Like chrono's ``to_rfc3339``: ``2025-01-02T03:04:05.678901+00:00``."""
    return datetime.now(UTC).isoformat()


def _decimal(value: int | None) -> str | None:
    return None if value is None else str(value)


_WEI_FIELDS = ("value", "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas")
# What one signed version of a transaction says; a replace, a cancel or an expiry signs another.
_TERMS = (
    "to",
    "data",
    "gas_limit",
    "speed",
    "signature",
    "is_noop",
    "is_canceled",
    *_WEI_FIELDS,
)


@dataclass(slots=True)
class Transaction:
    id: str
    relayer_id: str
    from_address: str
    to: str | None
    data: str | None
    value: int
    gas_limit: int | None
    gas_price: int | None
    max_fee_per_gas: int | None
    max_priority_fee_per_gas: int | None
    speed: str | None
    created_at: str
    valid_until_ts: float  # epoch seconds; not returned by the API, as upstream
    status: Status = Status.pending
    status_reason: str | None = None
    hash: str | None = None
    nonce: int | None = None
    sent_at: str | None = None
    confirmed_at: str | None = None
    signature: dict[str, Any] | None = None
    is_canceled: bool = False
    # Internal state, persisted so a restart resumes where it stopped.
    is_noop: bool = False
    will_fail: bool = False
    delete_at_ts: float | None = None
    hashes: list[str] = field(default_factory=list)
    # Chain mode: the signed transaction (sent again as it is if the node lost it), and the
    # block its receipt is in.
    raw: str | None = None
    mined_block: int | None = None
    # Chain mode: the terms of every version signed, by hash. The versions race for one
    # nonce; whichever the chain mines, the record takes its terms (take_version).
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Bumped on every scheduling decision; a timer carrying an older value is stale.
    version: int = 0

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    def response(self) -> dict[str, Any]:
        """``EvmTransactionResponse``: fee fields as decimal strings, value as 0x-hex."""
        return {
            "id": self.id,
            "hash": self.hash,
            "status": self.status,
            "status_reason": self.status_reason,
            "created_at": self.created_at,
            "sent_at": self.sent_at,
            "confirmed_at": self.confirmed_at,
            "gas_price": _decimal(self.gas_price),
            "gas_limit": self.gas_limit,
            "nonce": self.nonce,
            "value": hex(self.value),
            "from": self.from_address,
            "to": self.to,
            "relayer_id": self.relayer_id,
            "data": self.data,
            "max_fee_per_gas": _decimal(self.max_fee_per_gas),
            "max_priority_fee_per_gas": _decimal(self.max_priority_fee_per_gas),
            "signature": self.signature,
            "speed": self.speed,
            "is_canceled": self.is_canceled,
        }

    def terms(self) -> dict[str, Any]:
        """This version's terms, wei amounts as decimal strings (kept in ``state()``)."""
        terms = {name: getattr(self, name) for name in _TERMS}
        for name in _WEI_FIELDS:
            terms[name] = _decimal(terms[name])
        return terms

    def take_version(self, tx_hash: str) -> None:
        """Become the version signed as ``tx_hash``: the one the chain mined, which may be an
        earlier one than the last signed (an original mined before its replacement)."""
        self.hash = tx_hash
        terms = self.versions.get(tx_hash)
        if terms is None:  # signed before versions were kept: only a cancel or expiry no-op
            self.is_noop = self.is_canceled = False
            return
        for name, value in terms.items():
            setattr(self, name, int(value) if name in _WEI_FIELDS and value is not None else value)

    def state(self) -> dict[str, Any]:
        """Everything needed to rebuild the record after a restart. Wei amounts are decimal
        strings: they can exceed what a JSON reader holds in a double."""
        return {
            "id": self.id,
            "relayer_id": self.relayer_id,
            "from_address": self.from_address,
            "to": self.to,
            "data": self.data,
            "value": str(self.value),
            "gas_limit": self.gas_limit,
            "gas_price": _decimal(self.gas_price),
            "max_fee_per_gas": _decimal(self.max_fee_per_gas),
            "max_priority_fee_per_gas": _decimal(self.max_priority_fee_per_gas),
            "speed": self.speed,
            "created_at": self.created_at,
            "valid_until_ts": self.valid_until_ts,
            "status": self.status,
            "status_reason": self.status_reason,
            "hash": self.hash,
            "nonce": self.nonce,
            "sent_at": self.sent_at,
            "confirmed_at": self.confirmed_at,
            "signature": self.signature,
            "is_canceled": self.is_canceled,
            "is_noop": self.is_noop,
            "will_fail": self.will_fail,
            "delete_at_ts": self.delete_at_ts,
            "hashes": list(self.hashes),
            "raw": self.raw,
            "mined_block": self.mined_block,
            "versions": {tx_hash: dict(terms) for tx_hash, terms in self.versions.items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Transaction:
        values = dict(state)
        values["status"] = Status(values["status"])
        for name in ("value", "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas"):
            if values.get(name) is not None:
                values[name] = int(values[name])
        return cls(**values)
