"""Every operation of the client, written once, without I/O.

An operation is a generator: it yields a :class:`Call` (an HTTP request to make) or a
:class:`Sleep`, is sent back a :class:`Reply` (or ``None`` after a sleep), and returns its
result. :class:`~relay_client.RelayClient` runs these with ``httpx.Client`` and
``time.sleep``, :class:`~relay_client.AsyncRelayClient` with ``httpx.AsyncClient`` and
``asyncio.sleep``: both behave the same because they share this code.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from relay_client import errors, gasless
from relay_client.models import (
    SPEEDS,
    Accepted,
    CallbackSettings,
    CancelResult,
    Page,
    SpeedUpResult,
    Status,
)

T = TypeVar("T")

RETRYABLE = frozenset({0, 429, 502, 503, 504})  # 0: the request never got an answer


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Reply:
    status: int  # 0: no answer (connection refused, timeout); ``body`` then says why
    headers: Mapping[str, str]
    body: Any  # the parsed JSON, or the text when it is not JSON


Flow = Generator[Call | Sleep, Reply | None, T]


def request(call: Call, retries: int) -> Flow[Reply]:
    """Make ``call``; on no answer, 429 or 5xx from a proxy or the API, try again up to
    ``retries`` times, waiting as the API's Retry-After says (else 0.5 s doubling, at most
    10 s). Retrying a submission is safe: it carries an idempotency key."""
    delay = 0.5
    attempt = 0
    while True:
        reply = yield call
        assert reply is not None
        if reply.status and reply.status < 400:
            return reply
        if reply.status not in RETRYABLE or attempt == retries:
            break
        attempt += 1
        wait = errors.parse_retry_after(reply.headers.get("retry-after"))
        yield Sleep(min(wait if wait is not None else delay, 60.0))
        delay = min(delay * 2, 10.0)
    if reply.status == 0:
        raise errors.RelayError(0, "connection_failed", str(reply.body))
    raise errors.from_response(reply.status, reply.body, reply.headers.get("retry-after"))


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def submit(
    path: str, body: dict[str, Any], idempotency_key: str | None, retries: int
) -> Flow[Accepted]:
    key = idempotency_key or new_idempotency_key()
    reply = yield from request(
        Call("POST", path, json=body, headers={"Idempotency-Key": key}), retries
    )
    return Accepted.from_json(
        reply.body,
        location=reply.headers.get("location"),
        replayed=reply.headers.get("idempotent-replayed") == "true",
        idempotency_key=key,
    )


def submit_direct(
    to: str,
    *,
    data: str,
    value: int | str,
    gas_limit: int | str | None,
    speed: str | None,
    valid_until: str | None,
    callback_url: str | None,
    idempotency_key: str | None,
    retries: int,
) -> Flow[Accepted]:
    if speed is not None and speed not in SPEEDS:
        raise ValueError(f"speed must be one of {', '.join(SPEEDS)}")
    body: dict[str, Any] = {"to": to, "data": data, "value": _decimal(value, "value")}
    if gas_limit is not None:
        body["gasLimit"] = _decimal(gas_limit, "gas_limit")
    if speed is not None:
        body["speed"] = speed
    if valid_until is not None:
        body["validUntil"] = valid_until
    if callback_url is not None:
        body["callbackUrl"] = callback_url
    return (yield from submit("/api/v1/relay/direct", body, idempotency_key, retries))


MAX_BATCH = 100


def submit_batch(
    transactions: Sequence[Mapping[str, Any]], idempotency_key: str | None, retries: int
) -> Flow[list[Accepted]]:
    """``transactions`` as ``POST /relay/direct`` takes them (``to``, ``data``, ``value``,
    ``gasLimit``, ``speed``, ``validUntil``, ``callbackUrl``; wei and gas as ints or decimal
    strings), accepted together or refused together."""
    if not 1 <= len(transactions) <= MAX_BATCH:
        raise ValueError(f"a batch holds 1-{MAX_BATCH} transactions, not {len(transactions)}")
    items = []
    for index, transaction in enumerate(transactions):
        item = dict(transaction)
        for name in ("value", "gasLimit"):
            if name in item:
                item[name] = _decimal(item[name], f"transactions[{index}].{name}")
        items.append(item)
    key = idempotency_key or new_idempotency_key()
    reply = yield from request(
        Call(
            "POST",
            "/api/v1/relay/batch",
            json={"transactions": items},
            headers={"Idempotency-Key": key},
        ),
        retries,
    )
    replayed = reply.headers.get("idempotent-replayed") == "true"
    return [
        Accepted.from_json(
            result,
            location=f"/api/v1/relay/status/{result['transactionId']}",
            replayed=replayed,
            idempotency_key=key,
        )
        for result in reply.body["results"]
    ]


def submit_gasless(
    signer: gasless.Signer,
    to: str,
    *,
    data: str,
    value: int,
    gas: int,
    deadline: int | None,
    nonce: int | None,
    callback_url: str | None,
    idempotency_key: str | None,
    retries: int,
) -> Flow[Accepted]:
    """Fetch the domain (and the nonce, unless given), sign the ForwardRequest, submit."""
    typed = (yield from request(Call("GET", "/api/v1/relay/gasless/domain"), retries)).body
    if nonce is None:
        nonce = yield from gasless_nonce(signer.address, retries)
    signed = gasless.forward_request(
        signer.address,
        to,
        data=data,
        value=value,
        gas=gas,
        nonce=nonce,
        deadline=deadline if deadline is not None else int(time.time()) + 3600,
    )
    body: dict[str, Any] = {"request": signed, "signature": gasless.sign(signer, typed, signed)}
    if callback_url is not None:
        body["callbackUrl"] = callback_url
    return (yield from submit("/api/v1/relay/gasless", body, idempotency_key, retries))


def gasless_nonce(address: str, retries: int) -> Flow[int]:
    path = f"/api/v1/relay/gasless/nonce/{quote(address, safe='')}"
    reply = yield from request(Call("GET", path), retries)
    return int(reply.body["nonce"])


def status(transaction_id: str, retries: int) -> Flow[Status]:
    path = f"/api/v1/relay/status/{quote(transaction_id, safe='')}"
    reply = yield from request(Call("GET", path), retries)
    return Status.from_json(reply.body, source=reply.headers.get("x-cache"))


def cancel(transaction_id: str, retries: int) -> Flow[CancelResult]:
    """Safe to retry: a cancel asked again answers where the first left it."""
    path = f"/api/v1/relay/transactions/{quote(transaction_id, safe='')}"
    reply = yield from request(Call("DELETE", path), retries)
    return CancelResult.from_json(reply.body)


def speed_up(transaction_id: str, speed: str, retries: int) -> Flow[SpeedUpResult]:
    """Safe to retry: asked again, the transaction is at that speed already (or, at the
    executor, replaced once more at it)."""
    if speed not in SPEEDS:
        raise ValueError(f"speed must be one of {', '.join(SPEEDS)}")
    path = f"/api/v1/relay/transactions/{quote(transaction_id, safe='')}/speed-up"
    reply = yield from request(Call("POST", path, json={"speed": speed}), retries)
    return SpeedUpResult.from_json(reply.body)


def wait(
    transaction_id: str,
    *,
    timeout_s: float,
    poll_s: float,
    max_poll_s: float,
    retries: int,
    clock: Any = time.monotonic,
) -> Flow[Status]:
    """Poll until the transaction is final: every ``poll_s`` at first, backing off by half
    each time to ``max_poll_s``; a 429 waits as long as its Retry-After says."""
    deadline = clock() + timeout_s
    delay = poll_s
    while True:
        current = yield from status(transaction_id, retries)
        if current.final:
            return current
        left = deadline - clock()
        if left <= 0:
            raise errors.WaitTimeout(transaction_id, current.status, timeout_s)
        yield Sleep(min(delay, left))
        delay = min(delay * 1.5, max_poll_s)


def set_callback(url: str | None, rotate_secret: bool, retries: int) -> Flow[CallbackSettings]:
    body = {"url": url, "rotateSecret": rotate_secret}
    reply = yield from request(Call("PUT", "/api/v1/clients/me/callback", json=body), retries)
    return CallbackSettings(reply.body["url"], reply.body.get("secret"))


def page(status: str | None, cursor: str | None, limit: int, retries: int) -> Flow[Page]:
    params: dict[str, Any] = {"limit": limit}
    if status is not None:
        params["status"] = status
    if cursor is not None:
        params["cursor"] = cursor
    reply = yield from request(Call("GET", "/api/v1/relay/transactions", params=params), retries)
    return Page.from_json(reply.body)


def _decimal(value: int | str, name: str) -> str:
    """Wei and gas as the API takes them: decimal strings, never floats."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{name} must be an int or a decimal string, not {type(value).__name__}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must not be negative")
        return str(value)
    return value
