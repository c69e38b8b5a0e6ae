"""Chain mode's transactions built (relayer_stub.chain.service): their gas price and gas limit
asked of the node, their fields signed with the relayer's key, and a replacement's price raised
to outbid the transaction it replaces at the same nonce."""

from __future__ import annotations

import logging
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from relay_core import evm
from relayer_stub.lifecycle import pricing
from relayer_stub.transactions.models import Transaction

log = logging.getLogger(__name__)

GAS_MARGIN_PERCENT = 110  # upstream adds 10 % to an estimate


async def price(rpc: evm.EvmRpc, speed: str, priority_fee: int) -> int:
    """(The latest base fee + a tip) x the speed's factor. Not ``eth_gasPrice``: a dev
    node suggests from recent transactions, which are ours, so each price would be the
    last one x the factor, growing until the relayer cannot pay."""
    block = await rpc.call("eth_getBlockByNumber", "latest", False)
    base_fee = (block or {}).get("baseFeePerGas")
    if base_fee is None:  # a chain without EIP-1559
        base = await rpc.gas_price()
    else:
        base = int(base_fee, 16) + priority_fee
    return pricing.speed_price(base, speed)


async def estimate(rpc: evm.EvmRpc, tx: Transaction, sender: str) -> int:
    """As upstream: the node's estimate plus 10 %, or a fixed fallback when estimation
    fails (a call that would revert is still sent, and fails on chain)."""
    try:
        estimated = await rpc.estimate_gas(
            {"from": sender, "to": address(tx.to), "data": tx.data or "0x", "value": tx.value}
        )
    except evm.RpcError as exc:
        log.info(
            "stub.chain.estimate_failed",
            extra={"transaction_id": tx.id, "why": evm.decode_revert(exc.revert_data)},
        )
        return pricing.fallback_gas_limit(tx.data)
    return estimated * GAS_MARGIN_PERCENT // 100


def sign(tx: Transaction, signer: LocalAccount, chain_id: int | None) -> None:
    fields: dict[str, Any] = {
        "nonce": tx.nonce,
        "gas": tx.gas_limit,
        "to": address(tx.to),
        "value": tx.value,
        "data": tx.data or "0x",
        "chainId": chain_id,
    }
    if tx.max_fee_per_gas is not None:
        fields |= {
            "maxFeePerGas": tx.max_fee_per_gas,
            "maxPriorityFeePerGas": tx.max_priority_fee_per_gas,
            "type": 2,
        }
    else:
        fields["gasPrice"] = tx.gas_price
    signed = signer.sign_transaction(fields)
    tx.raw = "0x" + signed.raw_transaction.hex().removeprefix("0x")
    tx.hash = "0x" + signed.hash.hex().removeprefix("0x")
    tx.hashes.append(tx.hash)
    v = int(signed.v)
    r, s = f"{signed.r:064x}", f"{signed.s:064x}"
    tx.signature = {"r": r, "s": s, "v": v, "sig": f"0x{r}{s}{v % 256:02x}"}
    tx.versions[tx.hash] = tx.terms()


def outbid(tx: Transaction) -> None:
    """Raise the price of ``tx``, about to be signed again as a replacement at its nonce."""
    if tx.gas_price is not None:
        tx.gas_price = pricing.outbid(tx.gas_price)
    else:
        assert tx.max_fee_per_gas is not None
        assert tx.max_priority_fee_per_gas is not None
        tx.max_fee_per_gas = pricing.outbid(tx.max_fee_per_gas)
        tx.max_priority_fee_per_gas = pricing.outbid(tx.max_priority_fee_per_gas)


def address(value: str | None) -> str | None:
    """As upstream parses it: any case, no checksum check (a signer wants the checksum)."""
    return None if value is None else to_checksum_address(value.lower())
