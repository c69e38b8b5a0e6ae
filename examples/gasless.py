"""Relay a gasless (ERC-2771) call: sign a ForwardRequest with your key, let Relay pay the gas.

    uv run python examples/gasless.py                      # beside a running `make run`
    uv run python examples/gasless.py --private-key 0x… --to 0x… --data 0x…

What it does, as any client would:
1. GET /api/v1/relay/gasless/domain      the EIP-712 domain and types to sign for
2. GET /api/v1/relay/gasless/nonce/{you}  the forwarder's next nonce for your address
3. sign the ForwardRequest (from, to, value, gas, nonce, deadline, data) with eth-account
4. POST /api/v1/relay/gasless             202 and a transaction id
5. GET /api/v1/relay/status/{id}          until it is final; prints the on-chain hash

Beside `make run` it needs no arguments: the API key is `.relay/dev-api-key`, the target is
the RelayRecipient `make run` deployed (`.relay/chain.json`), and the call is
`record(uint256)`, which stores who the chain thinks called it: your address, not the
relayer's. The signer needs no ether: the relayer pays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import keccak

FINAL = {"confirmed", "failed", "expired", "canceled"}


def record_call(tag: int) -> str:
    """Calldata for RelayRecipient.record(uint256 tag)."""
    return "0x" + keccak(text="record(uint256)")[:4].hex() + f"{tag:064x}"


def main() -> int:
    state = Path(os.environ.get("RELAY_STATE_DIR", ".relay"))
    chain = _read_json(state / "chain.json")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", default=os.environ.get("RELAY_API_URL", _local_api()))
    parser.add_argument("--api-key", default=os.environ.get("RELAY_API_KEY") or _dev_key(state))
    parser.add_argument(
        "--private-key",
        default=os.environ.get("SIGNER_PRIVATE_KEY"),
        help="the signer's key (default: a new one, printed)",
    )
    parser.add_argument("--to", default=chain.get("recipient"), help="the contract to call")
    parser.add_argument("--data", help="calldata (default: record(<random tag>))")
    parser.add_argument("--gas", type=int, default=200_000, help="gas for the forwarded call")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    args = parser.parse_args()
    if not args.api_key:
        parser.error("no API key: pass --api-key or set RELAY_API_KEY (or run `make run`)")
    if not args.to:
        parser.error("no target: pass --to (or run `make run`, which deploys one)")

    signer = Account.from_key(args.private_key) if args.private_key else Account.create()
    if not args.private_key:
        print(f"signer  {signer.address}  (new key {signer.key.hex()})")
    tag = int.from_bytes(os.urandom(4), "big")
    data = args.data or record_call(tag)

    with httpx.Client(base_url=args.api, headers={"X-API-Key": args.api_key}, timeout=10) as api:
        typed = _ok(api.get("/api/v1/relay/gasless/domain"))
        nonce = int(_ok(api.get(f"/api/v1/relay/gasless/nonce/{signer.address}"))["nonce"])
        request = {
            "from": signer.address,
            "to": args.to,
            "value": "0",
            "gas": str(args.gas),
            "nonce": str(nonce),
            "deadline": int(time.time()) + 3600,
            "data": data,
        }
        message = {
            **request,
            "value": 0,
            "gas": args.gas,
            "nonce": nonce,
            "data": bytes.fromhex(data[2:]),
        }
        signable = encode_typed_data(full_message={**typed, "message": message})
        signature = "0x" + bytes(signer.sign_message(signable).signature).hex()
        accepted = _ok(
            api.post(
                "/api/v1/relay/gasless",
                json={"request": request, "signature": signature},
                headers={"Idempotency-Key": str(uuid.uuid4())},
            )
        )
        transaction_id = accepted["transactionId"]
        print(f"accepted {transaction_id} (nonce {nonce})")
        status = _wait(api, transaction_id, args.timeout)
    print(f"status  {status['status']}")
    print(f"hash    {status['hash']}")
    if status["status"] != "confirmed":
        print(f"error   {status.get('errorMessage')}", file=sys.stderr)
        return 1
    return 0


def _wait(api: httpx.Client, transaction_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        status = _ok(api.get(f"/api/v1/relay/status/{transaction_id}"))
        if status["status"] in FINAL or time.monotonic() > deadline:
            return dict(status)
        print(f"  ... {status['status']}")
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        sys.exit(
            f"{response.request.method} {response.request.url.path}: "
            f"{response.status_code} {response.text}"
        )
    return response.json()


def _read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())) if path.exists() else {}


def _dev_key(state: Path) -> str | None:
    key = state / "dev-api-key"
    return key.read_text().strip() if key.exists() else None


def _local_api() -> str:
    return f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"


if __name__ == "__main__":
    sys.exit(main())
