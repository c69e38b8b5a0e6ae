"""Send, get, list, cancel and replace, with upstream's checks and error messages."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from relay_core.errors import BadRequest, NotFound, RelayError
from relayer_stub.errors import MalformedJson
from relayer_stub.faults.service import FaultInjector
from relayer_stub.ledger.repository import Ledger
from relayer_stub.ledger.schemas import Submission
from relayer_stub.lifecycle.service import Lifecycle
from relayer_stub.transactions.models import Status, Transaction, new_uuid4, now_rfc3339
from relayer_stub.transactions.schemas import SendRequest, normalize_data, parse_send_request
from relayer_stub.transactions.store import TransactionStore

log = logging.getLogger(__name__)

DEFAULT_VALID_FOR_S = 8 * 3600  # upstream's default valid_until: created_at + 8 h


class LedgerWriteFailed(RelayError):
    status_code = 500
    code = "internal_error"


def read_send_request(body: bytes, now_ts: float) -> SendRequest:
    """The body of a send or a replace, checked as upstream checks it (400s, or a plain-text
    400 for malformed JSON)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedJson(str(exc)) from None
    return parse_send_request(payload, now_ts)


class TransactionService:
    def __init__(
        self,
        *,
        relayers: dict[str, str],
        store: TransactionStore,
        ledger: Ledger,
        lifecycle: Lifecycle,
        faults: FaultInjector,
    ) -> None:
        self.relayers = relayers
        self._store = store
        self._ledger = ledger
        self._lifecycle = lifecycle
        self._faults = faults
        self.hanging = 0

    def relayer_address(self, relayer_id: str) -> str:
        address = self.relayers.get(relayer_id)
        if address is None:
            raise NotFound(f"Relayer with ID {relayer_id} not found")
        return address

    async def send(self, relayer_id: str, body: bytes) -> dict[str, Any]:
        from_address = self.relayer_address(relayer_id)
        now_ts = time.time()
        request = read_send_request(body, now_ts)
        if self._faults.rejects(request.to):
            raise BadRequest("Transaction target address is not whitelisted")

        created_at = now_rfc3339()
        tx = Transaction(
            id=new_uuid4(),
            relayer_id=relayer_id,
            from_address=from_address,
            to=request.to,
            data=request.data,
            value=request.value,
            gas_limit=request.gas_limit,
            gas_price=request.gas_price,
            max_fee_per_gas=request.max_fee_per_gas,
            max_priority_fee_per_gas=request.max_priority_fee_per_gas,
            speed=request.speed,
            created_at=created_at,
            valid_until_ts=request.valid_until_ts or now_ts + DEFAULT_VALID_FOR_S,
        )
        self._lifecycle.admit(tx)
        hang_s = self._faults.hang_s(request.to)
        response = tx.response()
        committed = self._ledger.record(
            Submission(
                id=tx.id,
                relayer_id=relayer_id,
                to=request.to,
                data=normalize_data(request.data),
                value=request.value,
                received_at=created_at,
                request=body,
                hung=hang_s is not None,
                status=tx.status,
                state=orjson.dumps(tx.state()),
            )
        )

        def on_commit(future: asyncio.Future[int]) -> None:
            # Runs even if the request is abandoned: a recorded send is always executed.
            if not future.cancelled() and future.exception() is None:
                self._store.add(tx)
                self._lifecycle.track(tx)

        committed.add_done_callback(on_commit)
        try:
            await asyncio.shield(committed)
        except Exception as exc:
            raise LedgerWriteFailed("Failed to record the transaction") from exc

        if hang_s is not None:
            log.info("stub.fault.hang", extra={"transaction_id": tx.id, "hang_s": hang_s})
            self.hanging += 1
            try:
                await asyncio.sleep(hang_s)
            finally:
                self.hanging -= 1
        return response

    def get(self, relayer_id: str, tx_id: str) -> dict[str, Any]:
        self.relayer_address(relayer_id)
        # Upstream looks the transaction up by id only, whatever the relayer in the path.
        tx = self._store.get(tx_id)
        if tx is None:
            raise NotFound(f"Transaction with ID {tx_id} not found")
        return tx.response()

    def list(
        self, relayer_id: str, page: int, per_page: int, status: str | None
    ) -> tuple[list[dict[str, Any]], int]:
        self.relayer_address(relayer_id)
        wanted: Status | None = None
        if status is not None and status != "":
            try:
                wanted = Status(status.lower())
            except ValueError:
                raise BadRequest(f"Invalid transaction status: {status}") from None
        txs, total = self._store.page(relayer_id, page, per_page, wanted)
        return [tx.response() for tx in txs], total

    def cancel(self, relayer_id: str, tx_id: str) -> dict[str, Any]:
        self.relayer_address(relayer_id)
        tx = self._store.get(tx_id)
        if tx is None:
            raise NotFound(f"Transaction with ID {tx_id} not found")
        self._lifecycle.cancel(tx)
        return tx.response()

    async def replace(self, relayer_id: str, tx_id: str, body: bytes) -> dict[str, Any]:
        """In upstream's order: the relayer (404), the body with the send's checks (400, the
        whitelist emulated by ``reject_to`` included), then the transaction (404) and its
        state (400). The ledger keeps the send as it was received; the transaction's state
        in it follows the replace, written behind as every change is."""
        self.relayer_address(relayer_id)
        request = read_send_request(body, time.time())
        if self._faults.rejects(request.to):
            raise BadRequest("Transaction target address is not whitelisted")
        tx = self._store.get(tx_id)
        if tx is None:
            raise NotFound(f"Transaction with ID {tx_id} not found")
        await self._lifecycle.replace(tx, request)
        return tx.response()

    def expire(self, tx_id: str) -> dict[str, Any]:
        tx = self._store.get(tx_id)
        if tx is None:
            raise NotFound(f"Transaction with ID {tx_id} not found")
        self._lifecycle.expire(tx)
        return tx.response()

    async def balance(self, relayer_id: str) -> int:
        """The relayer's balance in wei: the ``relayer_balances`` fault if it names the relayer,
        otherwise the lifecycle's (memory: 10**21; chain: eth_getBalance of its account)."""
        self.relayer_address(relayer_id)
        override = self._faults.balance_override(relayer_id)
        if override is not None:
            return override
        return await self._lifecycle.balance(relayer_id)

    async def relayer_status(self, relayer_id: str) -> dict[str, Any]:
        balance = await self.balance(relayer_id)
        return {
            "network_type": "evm",
            "balance": str(balance),
            "pending_transactions_count": self._store.in_flight(relayer_id),
            "last_confirmed_transaction_timestamp": self._store.last_confirmed(relayer_id),
            "system_disabled": False,
            "paused": False,
            "nonce": str(self._lifecycle.next_nonce(relayer_id)),
        }
