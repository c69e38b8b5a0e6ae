"""The public lifecycle of a relayed transaction and the rules for moving along it."""

from __future__ import annotations

from enum import StrEnum


class TxStatus(StrEnum):
    pending = "pending"
    processing = "processing"
    submitted = "submitted"
    mined = "mined"
    confirmed = "confirmed"
    failed = "failed"
    expired = "expired"
    canceled = "canceled"


class TxType(StrEnum):
    direct = "direct"
    gasless = "gasless"


TERMINAL = frozenset({TxStatus.confirmed, TxStatus.failed, TxStatus.expired, TxStatus.canceled})

# Position on the forward path; terminal side exits rank above everything so nothing leaves them.
_RANK = {
    TxStatus.pending: 0,
    TxStatus.processing: 1,
    TxStatus.submitted: 2,
    TxStatus.mined: 3,
    TxStatus.confirmed: 4,
    TxStatus.failed: 4,
    TxStatus.expired: 4,
    TxStatus.canceled: 4,
}


def is_terminal(status: TxStatus | str) -> bool:
    return TxStatus(status) in TERMINAL


def can_advance(current: TxStatus | str, new: TxStatus | str) -> bool:
    """True when moving from ``current`` to ``new`` goes forward.

    A late, replayed or reordered update never moves a transaction backwards and never
    leaves a terminal state. ``processing`` may fall back to ``pending`` only through the
    reaper, which uses its own compare-and-set rather than this rule.
    """
    current, new = TxStatus(current), TxStatus(new)
    if current in TERMINAL:
        return False
    return _RANK[new] > _RANK[current]


class CancelStep(StrEnum):
    """The steps of a client's cancel that change no status: each is an event on the
    transaction (from and into its status) and a notification under this name. Where it ends
    is a status change like any other (``canceled``, or ``confirmed`` if it came too late)."""

    requested = "transaction.cancel_requested"  # written on the row; sent once the executor has it
    sent = "transaction.cancel_sent"  # the executor took it: canceled, or replaced with a no-op
    refused = "transaction.cancel_refused"  # the executor had mined it already: too late
