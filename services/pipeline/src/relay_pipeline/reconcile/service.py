"""Reconciliation against the chain: does every confirmed transaction have the receipt its row
says it has?

For each confirmed row: a receipt exists at its hash, in the recorded block, with status 0x1
(success), and gas used × effective gas price equals the recorded fee (and the recorded gas
used and price, when present, are the receipt's). Each difference is one
:class:`Mismatch`; a transaction can have several.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from relay_pipeline.reconcile.repository import Recorded
from relay_pipeline.reconcile.rpc import Receipt, ReceiptSource

MISSING_RECEIPT = "missing_receipt"
BLOCK = "block"
STATUS = "status"
FEE = "fee"
KINDS = (MISSING_RECEIPT, BLOCK, STATUS, FEE)
CHUNK = 1_000  # rows asked about per round of batch requests


@dataclass(frozen=True)
class Mismatch:
    transaction_id: str
    hash: str | None
    kind: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Outcome:
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(KINDS, 0)
        for mismatch in self.mismatches:
            found[mismatch.kind] += 1
        return {kind: n for kind, n in found.items() if n}

    @property
    def transactions_mismatched(self) -> int:
        return len({m.transaction_id for m in self.mismatches})


def compare(row: Recorded, receipt: Receipt | None) -> list[Mismatch]:
    """What differs between a confirmed row and the chain's receipt at its hash."""

    def found(kind: str, detail: str) -> Mismatch:
        return Mismatch(row.id, row.hash, kind, detail)

    if row.hash is None:
        return [found(MISSING_RECEIPT, "confirmed without a recorded hash")]
    if receipt is None:
        return [found(MISSING_RECEIPT, "the chain has no receipt at this hash")]
    out = []
    block = _quantity(receipt.get("blockNumber"))
    if block != row.block_number:
        out.append(found(BLOCK, f"recorded block {row.block_number}, receipt's {block}"))
    status = receipt.get("status")
    if _quantity(status) != 1:
        said = "reverted" if _quantity(status) == 0 else "no status"
        out.append(found(STATUS, f"receipt status {status} ({said}), not 0x1"))
    gas_used = _quantity(receipt.get("gasUsed"))
    price = _quantity(receipt.get("effectiveGasPrice"))
    if gas_used is None or price is None:
        out.append(found(FEE, "the receipt has no gasUsed or effectiveGasPrice"))
        return out
    fee = gas_used * price
    differs = []
    if row.fee_wei is None:
        differs.append(f"no fee, receipt's {gas_used} × {price} = {fee} wei")
    elif _int(row.fee_wei) != fee:
        differs.append(f"fee {row.fee_wei} wei, receipt's {gas_used} × {price} = {fee}")
    if row.gas_used is not None and row.gas_used != gas_used:
        differs.append(f"gas used {row.gas_used}, receipt's {gas_used}")
    if row.effective_gas_price is not None and _int(row.effective_gas_price) != price:
        differs.append(f"gas price {row.effective_gas_price}, receipt's {price}")
    if differs:
        out.append(found(FEE, "recorded " + "; ".join(differs)))
    return out


def reconcile(
    rows: Iterable[Recorded],
    chain: ReceiptSource,
    *,
    chunk: int = CHUNK,
    checked: Callable[[int], None] = lambda _n: None,
) -> Outcome:
    """Compare every row with its receipt, ``chunk`` rows per round of requests; ``checked``
    is told the running count after each round."""
    outcome = Outcome()
    for part in _chunks(rows, chunk):
        hashes = sorted({row.hash for row in part if row.hash is not None})
        receipts = chain.receipts(hashes) if hashes else {}
        for row in part:
            outcome.mismatches += compare(row, receipts.get(row.hash) if row.hash else None)
        outcome.checked += len(part)
        checked(outcome.checked)
    return outcome


def sample(rows: Iterable[Recorded], size: int, seed: int) -> list[Recorded]:
    """``size`` rows drawn uniformly from ``rows`` in one pass (reservoir sampling), in their
    original order: the same rows in the same order and the same seed draw the same sample."""
    rng = random.Random(seed)
    kept: list[tuple[int, Recorded]] = []
    for index, row in enumerate(rows):
        if index < size:
            kept.append((index, row))
        else:
            slot = rng.randrange(index + 1)
            if slot < size:
                kept[slot] = (index, row)
    return [row for _index, row in sorted(kept, key=lambda pair: pair[0])]


def _chunks(rows: Iterable[Recorded], size: int) -> Iterator[list[Recorded]]:
    part: list[Recorded] = []
    for row in rows:
        part.append(row)
        if len(part) >= size:
            yield part
            part = []
    if part:
        yield part


def _quantity(value: Any) -> int | None:
    """A JSON-RPC quantity (``0x1b4``) as an int; None when absent or malformed."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 16) if value.lower().startswith("0x") else int(value)
        except ValueError:
            return None
    return None


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None
