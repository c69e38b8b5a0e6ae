"""Ledger rows in and out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Submission:
    """One accepted send, as recorded before the 200 leaves."""

    id: str
    relayer_id: str
    to: str | None
    data: str  # normalized: lower-case, 0x-prefixed
    value: int
    received_at: str
    request: bytes  # the request body as JSON
    hung: bool
    status: str
    state: bytes  # Transaction.state() as JSON


@dataclass(frozen=True, slots=True)
class LedgerQuery:
    to: str | None = None
    data: str | None = None
    relayer_id: str | None = None
    status: str | None = None
    limit: int = 1000
    offset: int = 0


@dataclass(slots=True)
class LoadedLedger:
    """What a start-up reads back: live transactions in creation order, and nonce counters."""

    states: list[dict[str, Any]] = field(default_factory=list)
    next_nonces: dict[str, int] = field(default_factory=dict)
    total: int = 0
