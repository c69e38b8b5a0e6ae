"""The three SQS calls on the hot paths, sent without botocore's machinery.

Through aiobotocore one SendMessageBatch, ReceiveMessage or DeleteMessageBatch costs 0.8-1.1 ms
of CPU here (parameter validation, the event hooks, serialising, the retry handler, parsing:
docs/performance.md, issue 18): a fifth of the consumer's CPU per message and a tenth of the
API's per request. :class:`SqsWire` sends exactly these three as SQS's JSON protocol (what
botocore itself sends: ``X-Amz-Target: AmazonSQS.<Action>``, the same body, the same answer)
over relay_core.http's keep-alive connections, signed with Signature Version 4 here
(``sign``, checked against botocore's signer in the tests), with the credentials and region
of the aiobotocore client it wraps, whose refreshing credentials (ECS task role, SSO...) it
reads at every call.

Everything else (queue URLs, attributes, redrive, move tasks) goes to that client unchanged:
``SqsWire`` answers every other method by delegating. Errors keep botocore's shape: AWS errors
come out as ``botocore.exceptions.ClientError`` with the same ``Error.Code`` botocore reports,
and a connection failure or a 5xx/throttling answer is tried again as often as the client's
``retries`` config allows (total attempts, botocore's standard mode), after a jittered
exponential backoff, before it is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import random
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import orjson
from botocore.exceptions import ClientError, NoCredentialsError

from relay_core import http

_CONTENT_TYPE = "application/x-amz-json-1.0"
_RETRY_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "RequestThrottled",
        "RequestThrottledException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "KMS.ThrottlingException",
    }
)


class SqsWire:
    def __init__(self, client: Any, credentials: Any, wire: http.HttpClient) -> None:
        self._client = client
        self._credentials = credentials
        self._http = wire
        meta = client.meta
        self._region = str(meta.region_name)
        self._url = str(meta.endpoint_url)
        parts = urlsplit(self._url)
        self._path = parts.path or "/"
        self._host = _host(parts.scheme, parts.hostname or "", parts.port)
        self._keys: dict[tuple[str, str], bytes] = {}
        retries = meta.config.retries or {}
        # as botocore reads its config: max_attempts counts the retries, total_max_attempts
        # the first try too
        total = retries.get("total_max_attempts")
        if total is None:
            total = int(retries.get("max_attempts", 2)) + 1
        self._attempts = max(1, int(total))
        self.calls = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def around(cls, client: Any, session: Any) -> AsyncIterator[SqsWire]:
        """Wrap ``client`` (made by ``session``) for as long as the block runs."""
        config = client.meta.config
        # The client's own limits: its pool size, its connect timeout (which here also covers
        # waiting for a free connection) and its read timeout (longer than a long poll).
        wire = http.HttpClient(
            str(client.meta.endpoint_url),
            max_connections=config.max_pool_connections,
            connect_timeout_s=config.connect_timeout,
            read_timeout_s=config.read_timeout,
        )
        try:
            # The credentials the client itself signs with (those given to it, else the
            # session's chain: environment, ECS task role...), refreshing ones included.
            signer = getattr(client, "_request_signer", None)
            credentials = getattr(signer, "_credentials", None)
            if credentials is None:
                credentials = await session.get_credentials()
            yield cls(client, credentials, wire)
        finally:
            await wire.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    # --- the hot calls: botocore's names, arguments and answers --------------------------

    async def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        return await self._call("SendMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries})

    async def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        return await self._call("DeleteMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries})

    async def receive_message(self, *, QueueUrl: str, **params: Any) -> Any:
        return await self._call("ReceiveMessage", {"QueueUrl": QueueUrl, **params})

    # --- the wire -----------------------------------------------------------------------

    async def _call(self, action: str, payload: dict[str, Any]) -> Any:
        body = orjson.dumps(payload)
        last = self._attempts - 1
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(random.uniform(0, min(20.0, 0.05 * 2**attempt)))
            headers = self.sign(action, body, await self._frozen(), time.gmtime())
            self.calls += 1
            try:
                response = await self._http.request("POST", self._path, headers=headers, body=body)
            except http.HttpError:  # no connection, or no answer: botocore retries these too
                if attempt == last:
                    raise
                continue
            status, raw, answer_headers = response.status, response.body, response.headers
            if status == 200:
                return orjson.loads(raw) if raw else {}
            error = _error(status, raw, answer_headers)
            retryable = status >= 500 or error["Error"]["Code"] in _RETRY_CODES
            if retryable and attempt < last:
                continue
            raise ClientError(error, action)
        raise AssertionError("unreachable")

    async def _frozen(self) -> Any:
        if self._credentials is None:
            raise NoCredentialsError()
        frozen = self._credentials.get_frozen_credentials()
        return await frozen if inspect.isawaitable(frozen) else frozen

    def sign(
        self, action: str, body: bytes, credentials: Any, now: time.struct_time
    ) -> dict[str, str]:
        """The request's headers, Authorization included (Signature Version 4, as botocore
        signs the same request: every header below is signed)."""
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", now)
        day = amz_date[:8]
        headers = {
            "content-type": _CONTENT_TYPE,
            "host": self._host,
            "x-amz-date": amz_date,
            "x-amz-target": f"AmazonSQS.{action}",
            "x-amzn-query-mode": "true",
        }
        if credentials.token:
            headers["x-amz-security-token"] = credentials.token
        names = sorted(headers)
        signed = ";".join(names)
        canonical = "\n".join(
            [
                "POST",
                self._path,
                "",
                *(f"{name}:{headers[name]}" for name in names),
                "",
                signed,
                hashlib.sha256(body).hexdigest(),
            ]
        )
        scope = f"{day}/{self._region}/sqs/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(
            self._key(credentials.secret_key, day), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers

    def _key(self, secret: str, day: str) -> bytes:
        found = self._keys.get((secret, day))
        if found is None:
            key = f"AWS4{secret}".encode()
            for part in (day, self._region, "sqs", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys.clear()  # one day's key at a time
            found = self._keys[(secret, day)] = key
        return found


def _host(scheme: str, hostname: str, port: int | None) -> str:
    default = {"http": 80, "https": 443}.get(scheme)
    return hostname if port is None or port == default else f"{hostname}:{port}"


def _error(status: int, raw: bytes, headers: Any) -> dict[str, Any]:
    """An error answer in botocore's shape. SQS's JSON protocol names the error in
    ``__type``; ``x-amzn-query-error`` carries the older code botocore reports for SQS
    (``AWS.SimpleQueueService.NonExistentQueue``), and that code wins, as it does there."""
    try:
        parsed = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    kind = str(parsed.get("__type") or parsed.get("code") or "").rpartition("#")[2]
    message = str(
        parsed.get("message") or parsed.get("Message") or raw[:200].decode(errors="replace")
    )
    error: dict[str, Any] = {"Code": kind or str(status), "Message": message}
    query = headers.get("x-amzn-query-error")
    if query:
        code, _, sender = query.partition(";")
        error.update(Code=code, QueryErrorCode=kind, Type=sender)
    return {
        "Error": error,
        "ResponseMetadata": {
            "HTTPStatusCode": status,
            "RequestId": headers.get("x-amzn-requestid", ""),
            "HTTPHeaders": {k.lower(): v for k, v in headers.items()},
        },
    }
