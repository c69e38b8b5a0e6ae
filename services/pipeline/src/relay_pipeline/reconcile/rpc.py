"""Transaction receipts for many hashes at once: JSON-RPC batch requests, a few in flight.

Why not ``relay_core.evm.EvmRpc``: it sends one call per HTTP request from an event loop, and
the pipeline runs no event loop (nor installs aiohttp). A reconciliation asks for thousands of
receipts; one request per receipt would spend most of its time on round trips. Here a batch
of ``batch_size`` calls goes in one request (the JSON-RPC 2.0 batch form, which geth, anvil,
Erigon, Nethermind and the hosted providers accept, often capped at 100 to 1 000 calls) and
``concurrency`` batches are in flight at a time, from threads, with the standard library's
HTTP client. ``batch_size=1`` sends plain single calls, for a node that refuses batches.

It retries a request that got no answer (twice, after a short pause) and nothing else: an
error the node answered is reported, not hidden.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

Receipt = dict[str, Any]
RETRIES = 2


class RpcFailure(RuntimeError):
    """The node could not be asked (no answer, not JSON-RPC) or answered with an error."""


class ReceiptSource(Protocol):
    def receipts(self, hashes: Sequence[str]) -> Mapping[str, Receipt | None]:
        """Each hash's receipt; None where the chain has none."""
        ...


class JsonRpcReceipts:
    """``eth_getTransactionReceipt`` over HTTP(S); close it (or use ``with``) when done."""

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 100,
        concurrency: int = 4,
        timeout_s: float = 30.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--rpc-url must be an http:// or https:// URL, not {url!r}")
        if batch_size < 1 or concurrency < 1:
            raise ValueError("batch size and concurrency must be at least 1")
        self.url = url
        self.batch_size = batch_size
        self._timeout = timeout_s
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="rpc")
        self.requests = 0  # HTTP requests sent (tests and the curious)

    def __enter__(self) -> JsonRpcReceipts:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def receipts(self, hashes: Sequence[str]) -> dict[str, Receipt | None]:
        batches = [
            list(hashes[i : i + self.batch_size]) for i in range(0, len(hashes), self.batch_size)
        ]
        found: dict[str, Receipt | None] = {}
        for answer in self._pool.map(self._batch, batches):
            found.update(answer)
        return found

    def _batch(self, hashes: list[str]) -> dict[str, Receipt | None]:
        calls = [
            {"jsonrpc": "2.0", "id": n, "method": "eth_getTransactionReceipt", "params": [h]}
            for n, h in enumerate(hashes)
        ]
        answer = self._post(calls if len(calls) > 1 else calls[0])
        if isinstance(answer, dict):
            if len(calls) > 1:  # a node that takes no batches answers with one error
                raise RpcFailure(
                    f"{self.url} did not answer a batch of {len(calls)} calls "
                    f"({_error(answer)}): try a smaller --batch-size, or 1"
                )
            answer = [answer]
        if not isinstance(answer, list):
            raise RpcFailure(f"{self.url}: not a JSON-RPC answer: {answer!r:.200}")
        by_id = {item.get("id"): item for item in answer if isinstance(item, dict)}
        found: dict[str, Receipt | None] = {}
        for n, tx_hash in enumerate(hashes):
            item = by_id.get(n)
            if item is None:
                raise RpcFailure(f"{self.url} left eth_getTransactionReceipt({tx_hash}) unanswered")
            if item.get("error"):
                raise RpcFailure(
                    f"{self.url}: eth_getTransactionReceipt({tx_hash}): {_error(item)}"
                )
            result = item.get("result")
            found[tx_hash] = result if isinstance(result, dict) else None
        return found

    def _post(self, body: Any) -> Any:
        data = json.dumps(body).encode()
        for attempt in range(RETRIES + 1):
            self.requests += 1
            request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
                self.url, data=data, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                # A rate limit or a gateway error: the node (or its proxy) said no.
                raise RpcFailure(f"{self.url} answered HTTP {exc.code}: {exc.reason}") from exc
            except OSError as exc:
                if attempt == RETRIES:
                    raise RpcFailure(f"{self.url} did not answer: {exc}") from exc
                time.sleep(0.5 * (attempt + 1))
                continue
            try:
                return json.loads(raw)
            except ValueError as exc:
                raise RpcFailure(f"{self.url}: not JSON: {raw[:200]!r}") from exc
        raise AssertionError("unreachable")


def _error(item: Mapping[str, Any]) -> str:
    error = item.get("error")
    if isinstance(error, dict):
        return f"{error.get('message')} (JSON-RPC {error.get('code')})"
    return str(error)
