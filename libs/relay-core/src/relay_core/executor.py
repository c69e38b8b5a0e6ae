"""Client for the executor: the OpenZeppelin Relayer v1.x HTTP API (or relayer-stub).

Errors are classified by what they prove about the executor's state, which is what the
consumer's exactly-once logic needs:

* ``certain_not_created``: the executor certainly has no record (connection refused, 429,
  4xx validation error); a retry cannot double-submit.
* otherwise the outcome is *in doubt* (timeout, 5xx, connection dropped mid-request): the
  executor may have created the transaction, so it must be looked up before any resubmit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from relay_core import jsonutil, tracing
from relay_core.metrics import EXECUTOR_SECONDS
from relay_wire import http


class ErrorKind(StrEnum):
    timeout = "timeout"
    connection = "connection"
    server_error = "server_error"
    rate_limited = "rate_limited"
    rejected = "rejected"  # 400/422: the executor refuses this transaction; retrying cannot help
    refused = "refused"  # 401/403/other 4xx: our credentials or the relayer's state, not the tx
    not_found = "not_found"


class ExecutorError(Exception):
    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        certain_not_created: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        self.certain_not_created = certain_not_created

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" + (f" (HTTP {self.status})" if self.status else "")


@dataclass(frozen=True, slots=True)
class ExecutorTx:
    id: str
    status: str
    hash: str | None
    to: str | None
    data: str | None
    value: int | None
    created_at: datetime | None
    status_reason: str | None
    raw: dict[str, Any]
    gas_limit: int | None = None
    speed: str | None = None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> ExecutorTx:
        return cls(
            id=str(data["id"]),
            status=str(data.get("status", "")).lower(),
            hash=data.get("hash"),
            to=data.get("to"),
            data=data.get("data"),
            value=_parse_value(data.get("value")),
            created_at=parse_time(data.get("created_at")),
            status_reason=data.get("status_reason"),
            raw=data,
            gas_limit=data["gas_limit"] if isinstance(data.get("gas_limit"), int) else None,
            speed=data.get("speed") if isinstance(data.get("speed"), str) else None,
        )


@dataclass(frozen=True, slots=True)
class ExecutorPage:
    """One page of the executor's list (newest first) and, if it says, how many there are."""

    items: list[ExecutorTx]
    total_items: int | None


def _parse_value(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value)
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def _seconds(value: Any) -> float | None:
    """A retry-after figure, or None for a missing or unreadable one (never an error)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is not None:  # naive UTC, like every timestamp in the database
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


class ExecutorClient:
    """One pooled HTTP client per process; built at start-up, closed at shutdown.

    On relay_wire.http's keep-alive connections: on the consumer's hot path (one POST per
    message) httpx's pool bookkeeping, then aiohttp's request machinery, each cost more CPU
    than the rest of the message's work (docs/performance.md). Connections open on first use.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        relayer_id: str,
        *,
        timeout_s: float = 10.0,
        max_connections: int = 100,
    ) -> None:
        prefix = urlsplit(base_url).path.rstrip("/")
        relayer = f"{prefix}/api/v1/relayers/{quote(relayer_id, safe='')}"
        self._base = f"{relayer}/transactions"
        self._status = f"{relayer}/status"
        self._headers = {"authorization": f"Bearer {api_key}"}
        self._json_headers = {**self._headers, "content-type": "application/json"}
        # The connect timeout covers waiting for a pooled connection and opening one: the
        # request was certainly not sent when it runs out. The read timeout: sent, maybe
        # acted upon.
        self._http = http.HttpClient(
            base_url,
            max_connections=max_connections,
            connect_timeout_s=min(timeout_s, 3.0),
            read_timeout_s=timeout_s,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        operation: str,
        method: str,
        target: str,
        *,
        json: Any = None,
    ) -> dict[str, Any]:
        """One request, timed by ``operation`` and result, carrying the current trace
        (``x-request-id``, ``traceparent``) when there is one."""
        started = time.perf_counter()
        trace = tracing.current()
        span = None if trace is None else tracing.child(trace, f"executor {operation}")
        result = "ok"
        try:
            return await self._send(method, target, json, span)
        except ExecutorError as exc:
            result = exc.kind.value
            raise
        finally:
            EXECUTOR_SECONDS.observe(operation, result, time.perf_counter() - started)
            if span is not None:  # a no-op unless spans are exported
                tracing.finish(span, error=None if result == "ok" else result)

    async def _send(
        self, method: str, target: str, json: Any, trace: tracing.Trace | None
    ) -> dict[str, Any]:
        body = None if json is None else orjson.dumps(json)
        headers = self._headers if body is None else self._json_headers
        if trace is not None:
            headers = {
                **headers,
                "x-request-id": trace.request_id,
                "traceparent": trace.traceparent,
            }
        try:
            response = await self._http.request(method, target, headers=headers, body=body)
        except http.NotSent as exc:
            if exc.timeout:  # no connection within the connect timeout: never sent
                raise ExecutorError(
                    ErrorKind.timeout, "executor did not answer in time", certain_not_created=True
                ) from exc
            raise ExecutorError(
                ErrorKind.connection, "executor refused the connection", certain_not_created=True
            ) from exc
        except http.AnswerTimeout as exc:
            raise ExecutorError(ErrorKind.timeout, "executor did not answer in time") from exc
        except http.HttpError as exc:
            raise ExecutorError(ErrorKind.connection, f"{type(exc).__name__}: {exc}") from exc
        return self._envelope(response.status, response.headers, response.body, _reason(response))

    @staticmethod
    def _envelope(
        status: int, headers: Mapping[str, str], raw: bytes, reason: str
    ) -> dict[str, Any]:
        try:
            body = jsonutil.loads(raw)
        except ValueError:
            body = {}
        message = ""
        if isinstance(body, dict):
            message = str(body.get("error") or body.get("message") or "")
        message = message or raw[:200].decode("utf-8", "replace") or reason
        if status == 429:
            after = body.get("after") if isinstance(body, dict) else None
            raise ExecutorError(
                ErrorKind.rate_limited,
                message,
                status=status,
                retry_after_s=_seconds(after) or _seconds(headers.get("x-ratelimit-after")),
                certain_not_created=True,
            )
        if status == 404:
            raise ExecutorError(
                ErrorKind.not_found, message, status=status, certain_not_created=True
            )
        if status in (400, 422):
            raise ExecutorError(
                ErrorKind.rejected, message, status=status, certain_not_created=True
            )
        if 400 <= status < 500:
            # 401 (wrong key), 403 (relayer paused or disabled), ...: an operator must act;
            # the transaction itself may be fine, so it is retried, never failed for this.
            raise ExecutorError(ErrorKind.refused, message, status=status, certain_not_created=True)
        if status >= 500:
            raise ExecutorError(ErrorKind.server_error, message, status=status)
        if not isinstance(body, dict) or not body.get("success"):
            raise ExecutorError(
                ErrorKind.server_error, f"unexpected answer: {message}", status=status
            )
        return body

    async def submit(self, payload: dict[str, Any]) -> ExecutorTx:
        body = await self._call("submit", "POST", self._base, json=payload)
        return ExecutorTx.from_api(body["data"])

    async def get(self, executor_tx_id: str) -> ExecutorTx:
        body = await self._call("get", "GET", f"{self._base}/{quote(executor_tx_id, safe='')}")
        return ExecutorTx.from_api(body["data"])

    async def cancel(self, executor_tx_id: str) -> ExecutorTx:
        target = f"{self._base}/{quote(executor_tx_id, safe='')}"
        body = await self._call("cancel", "DELETE", target)
        return ExecutorTx.from_api(body["data"])

    async def replace(self, executor_tx_id: str, payload: dict[str, Any]) -> ExecutorTx:
        """The executor's replace: the transaction keeps its id and nonce and is sent again
        with ``payload`` (a send's body), priced anew for its speed; a new hash once sent."""
        target = f"{self._base}/{quote(executor_tx_id, safe='')}"
        body = await self._call("replace", "PUT", target, json=payload)
        return ExecutorTx.from_api(body["data"])

    async def status(self) -> dict[str, Any]:
        """The relayer's status: ``balance`` (wei, a decimal string),
        ``pending_transactions_count``, ``last_confirmed_transaction_timestamp``, ``paused``,
        ``system_disabled``, ``nonce`` (shared/reference/oz-relayer-api.md)."""
        body = await self._call("status", "GET", self._status)
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    async def probe(self) -> dict[str, Any]:
        """The relayer's status (``GET /relayers/{id}/status``): an authenticated read as cheap
        as any, answered by the same rate limiter as the sends. A relayer that is paused or
        disabled cannot send either: that is an error (``refused``), as its sends would be."""
        status = await self.status()
        if status.get("paused") or status.get("system_disabled"):
            raise ExecutorError(
                ErrorKind.refused,
                "the relayer is " + ("paused" if status.get("paused") else "disabled"),
                certain_not_created=True,
            )
        return status

    async def list_page(self, page: int, per_page: int = 50) -> ExecutorPage:
        body = await self._list(page, per_page, None)
        pagination = body.get("pagination") or {}
        total = pagination.get("total_items") if isinstance(pagination, dict) else None
        return ExecutorPage(
            items=[ExecutorTx.from_api(item) for item in body.get("data") or []],
            total_items=int(total) if isinstance(total, int) else None,
        )

    async def list_raw(
        self, page: int, per_page: int, status: str | None = None
    ) -> list[dict[str, Any]]:
        """One page of the list as the executor sent it (newest first), of ``status`` only
        where it filters (OZ Relayer v1.6.0 and later: an older one sends every status)."""
        items = (await self._list(page, per_page, status)).get("data") or []
        return [item for item in items if isinstance(item, dict)]

    async def _list(self, page: int, per_page: int, status: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"page": page, "per_page": per_page}
        if status is not None:
            params["status"] = status
        return await self._call("list", "GET", f"{self._base}{http.query(params)}")


def _reason(response: http.Response) -> str:
    try:
        return HTTPStatus(response.status).phrase
    except ValueError:
        return ""
