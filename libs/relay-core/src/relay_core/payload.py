"""What the executor is sent for a row: a direct call as the client asked for it, a gasless
request wrapped in the forwarder's ``execute`` with the gas the forwarder itself needs. The
consumer sends it (POST) and the API's speed-up replaces it with it (PUT), at the speed the
row's request has then."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from relay_core import ethereum
from relay_core.db.models import Transaction
from relay_core.statuses import TxType


def executor_payload(
    tx: Transaction, forwarder_gas_overhead: int, request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``request``: the row's request as it is to be sent (a speed-up's, not yet written)."""
    request = tx.request if request is None else request
    if tx.type == TxType.gasless:
        fwd = request["request"]
        forward = ethereum.ForwardRequest(
            sender=fwd["from"],
            to=fwd["to"],
            value=int(fwd["value"]),
            gas=int(fwd["gas"]),
            nonce=int(fwd["nonce"]),
            deadline=int(fwd["deadline"]),
            data=fwd["data"],
        )
        payload: dict[str, Any] = {
            "to": request["forwarder"],
            "data": ethereum.forwarder_execute_calldata(forward, request["signature"]),
            "value": fwd["value"],
            "gas_limit": forward.gas + forwarder_gas_overhead,
            "speed": request.get("speed") or "fast",  # a speed-up's, else the executor's default
        }
    else:
        payload = {
            "to": request["to"],
            "data": request.get("data") or "0x",
            "value": request.get("value") or "0",
            "speed": request.get("speed") or "fast",
        }
        if request.get("gasLimit"):
            payload["gas_limit"] = int(request["gasLimit"])
    if tx.valid_until is not None:
        payload["valid_until"] = (
            tx.valid_until.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
        )
    return payload
