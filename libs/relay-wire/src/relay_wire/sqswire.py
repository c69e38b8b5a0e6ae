"""The three SQS calls on the hot paths, sent without botocore's machinery.

Through aiobotocore one SendMessageBatch, ReceiveMessage or DeleteMessageBatch costs 0.8-1.1 ms
of CPU here (parameter validation, the event hooks, serialising, the retry handler, parsing:
docs/performance.md, issue 18): a fifth of the consumer's CPU per message and a tenth of the
API's per request. :class:`SqsWire` sends exactly these three as SQS's JSON protocol (what
botocore itself sends: ``X-Amz-Target: AmazonSQS.<Action>``, the same body, the same answer)
over relay_wire.http's keep-alive connections, signed with Signature Version 4 here
(``sign``, checked against botocore's signer in the tests), with the credentials and region
of the aiobotocore client it wraps, whose refreshing credentials (ECS task role, SSO...) it
reads at every call.

Everything else (queue URLs, attributes, redrive, move tasks) goes to that client unchanged:
``SqsWire`` answers every other method by delegating. Errors keep botocore's shape: AWS errors
come out as ``botocore.exceptions.ClientError`` with the same ``Error.Code`` botocore reports.

Retries, on a budget: a call that got no answer (no connection, none in time, a broken one)
or a 5xx/throttling answer is tried again after a jittered exponential backoff (at most
``_MOST_BACKOFF_S``), as often as the client's ``retries`` config allows (total attempts,
botocore's standard mode) but never more than ``_MOST_ATTEMPTS`` attempts, and no retry
starts later than ``_RETRY_WINDOW_S`` after the call began: a caller waits a bounded time,
then gets the last error (each attempt itself bounded by the client's timeouts). Resending a
request the server may have received is safe for these three calls (see ``_call``).

The signature (``sign_request``, and ``SqsWire.sign`` on the same steps): the canonical URI
is the request line's path with dot segments and empty segments removed and URI-encoded
again (an endpoint's already percent-encoded path is so encoded twice, as every service but
S3 expects), the query's names and values RFC 3986-encoded and sorted, the headers' names in
lower case, their values trimmed, spaces collapsed and repeated ones joined by commas: the
AWS SigV4 test suite's vectors are in the tests. An IPv6 endpoint's Host keeps its brackets.
What it does not do: S3's single encoding and unsigned or chunked payloads, presigned URLs,
SigV4a; a hot call has no query and a path fixed at construction, so neither is worked out
per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import random
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import orjson
from botocore.exceptions import ClientError, NoCredentialsError

from relay_wire import http

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
# The retry budget (module docstring): attempts at most, the longest backoff, and how long
# after a call began a retry may still start.
_MOST_ATTEMPTS = 4
_MOST_BACKOFF_S = 1.0
_RETRY_WINDOW_S = 5.0
# What an endpoint's path keeps as it is on the wire (RFC 3986's reserved characters and the
# percent sign: the path is percent-encoded already, or made so): spaces and non-ASCII go
# percent-encoded.
_PATH_SAFE = "/%!$&'()*+,;=:@-._~"


class SqsWire:
    def __init__(self, client: Any, credentials: Any, wire: http.HttpClient) -> None:
        self._client = client
        self._credentials = credentials
        self._http = wire
        meta = client.meta
        self._region = str(meta.region_name)
        self._url = str(meta.endpoint_url)
        parts = urlsplit(self._url)
        self._path = quote(parts.path or "/", safe=_PATH_SAFE)  # as the request line says it
        self._canonical_path = canonical_uri(self._path)
        self._host = _host(parts.scheme, parts.hostname or "", parts.port)
        self._keys: dict[tuple[str, str], bytes] = {}
        retries = meta.config.retries or {}
        # as botocore reads its config: max_attempts counts the retries, total_max_attempts
        # the first try too
        total = retries.get("total_max_attempts")
        if total is None:
            total = int(retries.get("max_attempts", 2)) + 1
        self._attempts = min(max(1, int(total)), _MOST_ATTEMPTS)
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
        """One call, tried again on the budget of the module's docstring. Every failure
        retried here may follow a request the server received (an answer lost, a 5xx after
        part of a batch): sending it again is safe for these three calls only because Relay's
        messages are at-least-once. A SendMessageBatch sent twice enqueues duplicates, which
        the consumer tells apart (it claims a row by compare-and-set and drops a message whose
        row is done or held); a DeleteMessageBatch deletes what is already gone, and answers
        so per entry; a ReceiveMessage whose answer was lost leaves its messages invisible
        until their visibility timeout, then delivers them again."""
        body = orjson.dumps(payload)
        window_ends = time.monotonic() + _RETRY_WINDOW_S
        attempt = 0
        while True:
            headers = self.sign(action, body, await self._frozen(), time.gmtime())
            self.calls += 1
            attempt += 1
            try:
                response = await self._http.request("POST", self._path, headers=headers, body=body)
            except http.HttpError:  # no connection, or no answer: botocore retries these too
                if not await self._backed_off(attempt, window_ends):
                    raise
                continue
            status, raw, answer_headers = response.status, response.body, response.headers
            if status == 200:
                return orjson.loads(raw) if raw else {}
            error = _error(status, raw, answer_headers)
            retryable = status >= 500 or error["Error"]["Code"] in _RETRY_CODES
            if not retryable or not await self._backed_off(attempt, window_ends):
                raise ClientError(error, action)

    async def _backed_off(self, attempts: int, window_ends: float) -> bool:
        """Wait before the next attempt; False, at once, if the budget has none left."""
        if attempts >= self._attempts:
            return False
        pause = random.uniform(0, min(_MOST_BACKOFF_S, 0.05 * 2**attempts))
        if time.monotonic() + pause > window_ends:
            return False
        await asyncio.sleep(pause)
        return True

    async def _frozen(self) -> Any:
        if self._credentials is None:
            raise NoCredentialsError()
        frozen = self._credentials.get_frozen_credentials()
        return await frozen if inspect.isawaitable(frozen) else frozen

    def sign(
        self, action: str, body: bytes, credentials: Any, now: time.struct_time
    ) -> dict[str, str]:
        """The request's headers, Authorization included (Signature Version 4, as botocore
        signs the same request: every header below is signed). :func:`sign_request`'s steps,
        with what is fixed worked out once: the path's canonical form, no query, headers
        whose names are lower case and whose values need no trimming."""
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
                self._canonical_path,
                "",
                *(f"{name}:{headers[name]}" for name in names),
                "",
                signed,
                hashlib.sha256(body).hexdigest(),
            ]
        )
        scope = f"{day}/{self._region}/sqs/aws4_request"
        _, signature = _signature(
            canonical, amz_date, scope, self._key(credentials.secret_key, day)
        )
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers

    def _key(self, secret: str, day: str) -> bytes:
        found = self._keys.get((secret, day))
        if found is None:
            self._keys.clear()  # one day's key at a time
            found = self._keys[(secret, day)] = signing_key(secret, day, self._region, "sqs")
        return found


@dataclass(frozen=True, slots=True)
class Signed:
    canonical_request: str
    string_to_sign: str
    signature: str
    authorization: str


def sign_request(
    method: str,
    path: str,
    query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    amz_date: str,
) -> Signed:
    """Signature Version 4 of a request: ``path`` and ``query`` as its request line has them,
    ``headers`` all signed (a name may repeat), for a service other than S3."""
    values: dict[str, list[str]] = {}
    for name, value in headers:
        # Trimall: no space around a value, one for each run of spaces inside it.
        values.setdefault(name.lower(), []).append(" ".join(value.split()))
    names = sorted(values)
    signed = ";".join(names)
    canonical = "\n".join(
        [
            method,
            canonical_uri(path),
            canonical_query(query),
            *(f"{name}:{','.join(values[name])}" for name in names),
            "",
            signed,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    day = amz_date[:8]
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign, signature = _signature(
        canonical, amz_date, scope, signing_key(secret_key, day, region, service)
    )
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return Signed(canonical, to_sign, signature, authorization)


def canonical_uri(path: str) -> str:
    """SigV4's canonical URI of a request line's ``path``: its dot segments resolved and its
    empty ones dropped (RFC 3986 §5.2.4; AWS drops doubled slashes too), then URI-encoded,
    ``/`` kept (what is percent-encoded already is encoded again, as SigV4 asks of every
    service but S3)."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment and segment != ".":
            segments.append(segment)
    trailing = "/" if segments and path.endswith("/") else ""
    return quote("/" + "/".join(segments) + trailing, safe="/~")


def canonical_query(query: str) -> str:
    """SigV4's canonical query string: each name and value RFC 3986-encoded (once: a query is
    decoded first), the pairs sorted by name, then value."""
    pairs = []
    for item in query.split("&"):
        if item:
            name, _, value = item.partition("=")
            pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _signature(canonical: str, amz_date: str, scope: str, key: bytes) -> tuple[str, str]:
    """The string to sign of a canonical request, and its signature."""
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{digest}"
    return to_sign, hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _host(scheme: str, hostname: str, port: int | None) -> str:
    """The Host header of an endpoint: urlsplit drops an IPv6 address's brackets, which the
    header (and so the signature) must have."""
    shown = f"[{hostname}]" if ":" in hostname else hostname
    default = {"http": 80, "https": 443}.get(scheme)
    return shown if port is None or port == default else f"{shown}:{port}"


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
