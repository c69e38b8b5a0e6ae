"""What a transaction is priced at, in memory mode and on chain alike: a speed's factor over a
base price, the least price that outbids a version already sent (a replacement at the same
nonce), and upstream's gas limits when estimation is not possible."""

from __future__ import annotations

from relayer_stub.transactions.models import Transaction

SPEED_PERCENT = {"safeLow": 100, "average": 125, "fast": 150, "fastest": 200}
DEFAULT_SPEED = "fast"  # upstream's speed when neither the request nor the transaction has one
# A replacement must outbid the version it replaces: nodes want at least +10 % on the fee cap
# and on the tip; 25 % leaves room for a base fee that rises meanwhile.
REPLACEMENT_PRICE_PERCENT = 125
_ERC20_TRANSFER = "a9059cbb"
_ERC20_TRANSFER_FROM = "23b872dd"


def speed_price(base: int, speed: str) -> int:
    return base * SPEED_PERCENT[speed] // 100


def outbid(fee: int) -> int:
    """A fee high enough for a node to take the replacement over the one paying ``fee``."""
    return fee * REPLACEMENT_PRICE_PERCENT // 100 + 1


def replacement_gas_price(tx: Transaction, market: int) -> int:
    """The legacy gas price for a new version of ``tx`` at its nonce: the market price for
    its speed, or more if that does not outbid the version signed already (as upstream's
    ``calculate_replacement_price`` raises it to the minimum bump). A legacy price counts as
    both fee cap and tip, so outbidding an EIP-1559 version's fee cap outbids its tip too."""
    signed_with = tx.gas_price if tx.gas_price is not None else tx.max_fee_per_gas
    return market if signed_with is None else max(market, outbid(signed_with))


def fallback_gas_limit(data: str | None) -> int:
    """What upstream falls back to when estimation fails."""
    body = (data or "").removeprefix("0x").lower()
    if not body:
        return 21_000
    if body.startswith(_ERC20_TRANSFER):
        return 65_000
    if body.startswith(_ERC20_TRANSFER_FROM):
        return 80_000
    return 200_000
