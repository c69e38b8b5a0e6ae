"""A small JSON-RPC client for an EVM node, and what a revert says.

Used by the relayer-stub's chain mode (sign, broadcast, receipts), the API (the forwarder's
nonce for a sender) and the consumer (a gasless sender's requests in nonce order). Errors are
split by what they prove about a send: :class:`RpcError` is the node's answer (it did not take
the request), :class:`RpcUnavailable` means no answer (it may have).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import aiohttp
import orjson
from eth_abi import decode as abi_decode
from eth_utils import keccak, to_checksum_address

_JSON = {"Content-Type": "application/json"}


class RpcError(Exception):
    """The node answered with an error (it did not take the request)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC {code})")
        self.code = code
        self.message = message
        self.data = data

    @property
    def revert_data(self) -> str | None:
        data = self.data
        if isinstance(data, dict):
            data = data.get("data")
        return data if isinstance(data, str) and data.startswith("0x") else None


class RpcUnavailable(Exception):
    """No answer (refused, timed out, cut off): a send may or may not have reached the node."""


class EvmRpc:
    """One pooled HTTP client; open it inside the running event loop, close it at shutdown."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = url
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._ids = itertools.count(1)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=_JSON)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, method: str, *params: Any) -> Any:
        body = orjson.dumps(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}
        )
        try:
            async with self._http().post(self.url, data=body) as response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RpcUnavailable(f"{method}: {type(exc).__name__}: {exc}") from exc
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RpcUnavailable(f"{method}: not JSON-RPC: {raw[:200]!r}") from exc
        if not isinstance(answer, dict):
            raise RpcUnavailable(f"{method}: unexpected answer {answer!r:.200}")
        error = answer.get("error")
        if error:
            raise RpcError(int(error.get("code", 0)), str(error.get("message")), error.get("data"))
        return answer.get("result")

    async def batch(self, method: str, params: list[list[Any]]) -> list[Any]:
        """``method`` once per entry of ``params``, as one JSON-RPC batch (one HTTP request):
        each call's result, in order, or the :class:`RpcError` the node answered it with. A
        node that does not take batches (it answers one error, not a list) is asked one call
        at a time instead. :class:`RpcUnavailable` when there is no answer."""
        if not params:
            return []
        first = next(self._ids)
        body = orjson.dumps(
            [
                {"jsonrpc": "2.0", "id": first + index, "method": method, "params": each}
                for index, each in enumerate(params)
            ]
        )
        for _ in params[1:]:
            next(self._ids)  # the ids this batch used are not given out again
        try:
            async with self._http().post(self.url, data=body) as response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RpcUnavailable(f"{method} (batch): {type(exc).__name__}: {exc}") from exc
        try:
            answers = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RpcUnavailable(f"{method} (batch): not JSON-RPC: {raw[:200]!r}") from exc
        if not isinstance(answers, list):  # batches refused: one call at a time
            return [await self._one(method, each) for each in params]
        out: list[Any] = [RpcUnavailable(f"{method}: no answer in the batch")] * len(params)
        for answer in answers:
            index = answer.get("id", -1) - first if isinstance(answer, dict) else -1
            if not 0 <= index < len(params):
                continue
            error = answer.get("error")
            out[index] = (
                RpcError(int(error.get("code", 0)), str(error.get("message")), error.get("data"))
                if error
                else answer.get("result")
            )
        return out

    async def _one(self, method: str, params: list[Any]) -> Any:
        try:
            return await self.call(method, *params)
        except RpcError as exc:
            return exc

    # --- the calls Relay makes ------------------------------------------------------------

    async def chain_id(self) -> int:
        return int(await self.call("eth_chainId"), 16)

    async def block_number(self) -> int:
        return int(await self.call("eth_blockNumber"), 16)

    async def nonce(self, address: str, block: str = "pending") -> int:
        return int(await self.call("eth_getTransactionCount", address, block), 16)

    async def balance(self, address: str, block: str = "latest") -> int:
        return int(await self.call("eth_getBalance", address, block), 16)

    async def gas_price(self) -> int:
        return int(await self.call("eth_gasPrice"), 16)

    async def estimate_gas(self, tx: dict[str, Any]) -> int:
        return int(await self.call("eth_estimateGas", _rpc_tx(tx)), 16)

    async def eth_call(self, tx: dict[str, Any], block: str | int = "latest") -> str:
        tag = hex(block) if isinstance(block, int) else block
        return str(await self.call("eth_call", _rpc_tx(tx), tag))

    async def send_raw(self, raw: str) -> str:
        return str(await self.call("eth_sendRawTransaction", raw))

    async def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        result = await self.call("eth_getTransactionReceipt", tx_hash)
        return result if isinstance(result, dict) else None

    async def receipts(self, tx_hashes: list[str], chunk: int = 100) -> list[dict[str, Any] | None]:
        """The receipts of ``tx_hashes`` in order (None where the node has none, or answered
        that one with an error), ``chunk`` to a JSON-RPC batch."""
        out: list[dict[str, Any] | None] = []
        for start in range(0, len(tx_hashes), chunk):
            part = [[tx_hash] for tx_hash in tx_hashes[start : start + chunk]]
            answers = await self.batch("eth_getTransactionReceipt", part)
            out.extend(answer if isinstance(answer, dict) else None for answer in answers)
        return out

    async def transaction(self, tx_hash: str) -> dict[str, Any] | None:
        result = await self.call("eth_getTransactionByHash", tx_hash)
        return result if isinstance(result, dict) else None


def _rpc_tx(tx: dict[str, Any]) -> dict[str, Any]:
    """Quantities as 0x-hex, as JSON-RPC wants them."""
    return {
        key: hex(value) if isinstance(value, int) and not isinstance(value, bool) else value
        for key, value in tx.items()
        if value is not None
    }


# --- the forwarder -------------------------------------------------------------------------------

NONCES_SELECTOR = keccak(text="nonces(address)")[:4].hex()


async def forwarder_nonce(rpc: EvmRpc, forwarder: str, owner: str) -> int:
    """``ERC2771Forwarder.nonces(owner)``: the nonce its next request must carry."""
    data = "0x" + NONCES_SELECTOR + owner.lower().removeprefix("0x").rjust(64, "0")
    return int(await rpc.eth_call({"to": forwarder, "data": data}), 16)


# --- reverts -------------------------------------------------------------------------------------

# Errors a relayed call may end with: Solidity's own and those of OpenZeppelin's forwarder.
_ERRORS = (
    "Error(string)",
    "Panic(uint256)",
    "FailedCall()",
    "ERC2771ForwarderInvalidSigner(address,address)",
    "ERC2771ForwarderMismatchedValue(uint256,uint256)",
    "ERC2771ForwarderExpiredRequest(uint48)",
    "ERC2771UntrustfulTarget(address,address)",
    "ERC2771ForwarderNoRefundReceiver()",
    "InsufficientBalance(uint256,uint256)",
)


@functools.cache
def _error_selectors() -> dict[str, tuple[str, list[str]]]:
    selectors = {}
    for signature in _ERRORS:
        name, _, args = signature.partition("(")
        types = [t for t in args.rstrip(")").split(",") if t]
        selectors[keccak(text=signature)[:4].hex()] = (name, types)
    return selectors


def decode_revert(data: str | None) -> str:
    """A readable reason for revert data: ``execution reverted: <message>`` for a require,
    the custom error with its arguments, or the raw data when it is unknown."""
    if not data or data in ("0x", "0x0"):
        return "execution reverted"
    body = data.removeprefix("0x")
    known = _error_selectors().get(body[:8].lower())
    if known is None:
        return f"execution reverted with data 0x{body[:200]}"
    name, types = known
    try:
        values = abi_decode(types, bytes.fromhex(body[8:])) if types else ()
    except Exception:
        return f"execution reverted: {name} (undecodable arguments)"
    if name == "Error":
        return f"execution reverted: {values[0]}"
    shown = ", ".join(
        to_checksum_address(v) if t == "address" else str(v)
        for t, v in zip(types, values, strict=True)
    )
    return f"execution reverted: {name}({shown})"
