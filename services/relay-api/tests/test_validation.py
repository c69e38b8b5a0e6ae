"""Bad input is refused with a clear 4xx naming the field, and leaves no row and no message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows, signed_gasless
from eth_account import Account

from relay_api.runtime import Runtime
from relay_core.ethereum import ForwarderDomain

DIRECT = "/api/v1/relay/direct"
GASLESS = "/api/v1/relay/gasless"
UINT256_PLUS_ONE = str(2**256)
LATER = (datetime.now(UTC) + timedelta(hours=1)).isoformat()


def direct(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"to": DEAD, "value": "1"}
    for key, value in fields.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


# (case id, body or raw bytes, extra headers, expected status, text the detail must name)
DIRECT_CASES: list[tuple[str, Any, dict[str, str], int, str]] = [
    ("to-missing", direct(to=...), {}, 422, "to"),
    ("to-null", direct(to=None), {}, 422, "to"),
    ("to-number", direct(to=123), {}, 422, "to"),
    ("to-short", direct(to="0x1234"), {}, 422, "to"),
    ("to-no-prefix", direct(to="000000000000000000000000000000000000dEaD"), {}, 422, "to"),
    ("to-non-hex", direct(to="0x" + "zz" * 20), {}, 422, "to"),
    # A rule the schema cannot state: 400 (the request is valid by the document's schema)
    ("to-bad-checksum", direct(to="0x000000000000000000000000000000000000DeaD"), {}, 400, "EIP-55"),
    ("to-too-long", direct(to=DEAD + "00"), {}, 422, "to"),
    ("data-odd-length", direct(data="0x123"), {}, 422, "data"),
    ("data-no-prefix", direct(data="1234"), {}, 422, "data"),
    ("data-non-hex", direct(data="0xzz"), {}, 422, "data"),
    ("data-too-large", direct(data="0x" + "ab" * 30000), {}, 400, "data"),
    ("value-float", direct(value=1.5), {}, 422, "value"),
    ("value-json-integer", direct(value=1), {}, 422, "value"),
    ("value-bool", direct(value=True), {}, 422, "value"),
    ("value-negative", direct(value="-1"), {}, 422, "value"),
    ("value-exponent", direct(value="1e18"), {}, 422, "value"),
    ("value-decimal-point", direct(value="1.0"), {}, 422, "value"),
    ("value-leading-zero", direct(value="01"), {}, 422, "value"),
    ("value-hex", direct(value="0x10"), {}, 422, "value"),
    ("value-above-uint256", direct(value=UINT256_PLUS_ONE), {}, 422, "value"),
    ("value-huge-digits", direct(value="9" * 500), {}, 422, "value"),
    ("value-trailing-newline", direct(value="5\n"), {}, 422, "value"),
    ("data-trailing-newline", direct(data="0xab\n"), {}, 422, "data"),
    ("to-trailing-newline", direct(to=DEAD + "\n"), {}, 422, "to"),
    ("gas-limit-above-block", direct(gasLimit="30000001"), {}, 400, "gasLimit"),
    ("gas-limit-below-intrinsic", direct(gasLimit="20999"), {}, 400, "gasLimit"),
    ("gas-limit-float-string", direct(gasLimit="21000.5"), {}, 422, "gasLimit"),
    ("gas-limit-number", direct(gasLimit=21000), {}, 422, "gasLimit"),
    ("speed-unknown", direct(speed="warp"), {}, 422, "speed"),
    ("valid-until-past", direct(validUntil="2020-01-01T00:00:00Z"), {}, 400, "validUntil"),
    ("valid-until-garbage", direct(validUntil="tomorrow"), {}, 400, "validUntil"),
    ("valid-until-no-offset", direct(validUntil="2099-01-01T00:00:00"), {}, 400, "validUntil"),
    ("valid-until-too-far", direct(validUntil="2099-01-01T00:00:00Z"), {}, 400, "validUntil"),
    ("unknown-field", direct(gas="21000"), {}, 422, "gas: unknown field"),
    ("callback-not-ascii", direct(callbackUrl="https://\u00cf/hook"), {}, 422, "callbackUrl"),
    ("callback-space", direct(callbackUrl="https://a.example/x y"), {}, 422, "callbackUrl"),
    ("callback-no-host", direct(callbackUrl="https:///hook"), {}, 422, "callbackUrl"),
    ("body-array", [direct()], {}, 422, "body"),
    ("body-string", "hello", {}, 422, "body"),
    ("body-empty-object", {}, {}, 422, "to"),
    ("malformed-json", b'{"to": "0x', {}, 400, "JSON"),
    ("wrong-content-type", b"to=0x", {"content-type": "text/plain"}, 415, "Content-Type"),
    (
        "form-content-type",
        b"to=0x",
        {"content-type": "application/x-www-form-urlencoded"},
        415,
        "Content-Type",
    ),
    ("oversized-body", b'{"to":"' + b"a" * 70000 + b'"}', {}, 413, "exceeds"),
    ("idempotency-key-with-space", direct(), {"Idempotency-Key": "a b"}, 400, "Idempotency-Key"),
    ("idempotency-key-too-long", direct(), {"Idempotency-Key": "k" * 256}, 400, "Idempotency-Key"),
]


async def _assert_refused(
    client: httpx.AsyncClient,
    runtime: Runtime,
    path: str,
    body: Any,
    headers: dict[str, str],
    api_key: str,
    status: int,
    names: str,
) -> None:
    all_headers = {"X-API-Key": api_key, **headers}
    if isinstance(body, bytes):
        all_headers.setdefault("content-type", "application/json")
        response = await client.post(path, content=body, headers=all_headers)
    else:
        response = await client.post(path, json=body, headers=all_headers)
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) >= {"error", "detail"}
    assert names in payload["detail"], payload
    assert "Traceback" not in response.text
    assert await count_rows(runtime) == 0
    assert runtime.publisher.backlog() == 0


@pytest.mark.parametrize(
    ("body", "headers", "status", "names"),
    [case[1:] for case in DIRECT_CASES],
    ids=[case[0] for case in DIRECT_CASES],
)
async def test_direct_bad_input_is_refused_naming_the_field_and_writes_nothing(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    queues: tuple[str, str],
    sqs: Any,
    body: Any,
    headers: dict[str, str],
    status: int,
    names: str,
) -> None:
    await _assert_refused(client, runtime, DIRECT, body, headers, api_key, status, names)
    received = await sqs.receive_message(QueueUrl=queues[0], WaitTimeSeconds=0)
    assert received.get("Messages", []) == []


def _gasless_cases(settings: Any) -> list[tuple[str, Any, int, str]]:
    owner, stranger = Account.create(), Account.create()
    good = signed_gasless(settings, account=owner)

    def tampered(**request_fields: Any) -> dict[str, Any]:
        body = signed_gasless(settings, account=owner)
        body["request"].update(request_fields)
        return body

    other_chain = ForwarderDomain(
        settings.forwarder_name, settings.forwarder_version, 1, settings.forwarder_address
    )
    return [
        (
            "signed-by-someone-else",
            signed_gasless(settings, account=owner, signer=stranger),
            400,
            "signature",
        ),
        (
            "signed-for-another-chain",
            signed_gasless(settings, account=owner, domain=other_chain),
            400,
            "signature",
        ),
        ("value-changed-after-signing", tampered(value="5"), 400, "signature"),
        ("signature-too-short", {**good, "signature": good["signature"][:-2]}, 422, "signature"),
        ("signature-not-hex", {**good, "signature": "0x" + "zz" * 65}, 422, "signature"),
        ("signature-missing", {"request": good["request"]}, 422, "signature"),
        ("signature-garbage-65-bytes", {**good, "signature": "0x" + "00" * 65}, 400, "signature"),
        (
            "deadline-expired",
            signed_gasless(settings, account=owner, deadline_in_s=-60),
            400,
            "request.deadline",
        ),
        ("deadline-float", tampered(deadline=1.5), 422, "request.deadline"),
        ("deadline-string", tampered(deadline="4102444800"), 422, "request.deadline"),
        ("deadline-above-uint48", tampered(deadline=2**48), 422, "request.deadline"),
        # Beyond year 9999: a date cannot even be made of it (it used to answer 500).
        ("deadline-year-10000", tampered(deadline=253402300800), 400, "request.deadline"),
        ("nonce-trailing-newline", tampered(nonce="3\n"), 422, "request.nonce"),
        ("nonce-negative", tampered(nonce="-1"), 422, "request.nonce"),
        ("nonce-number", tampered(nonce=3), 422, "request.nonce"),
        (
            "gas-above-block",
            signed_gasless(settings, account=owner, gas="30000001"),
            400,
            "request.gas",
        ),
        (
            "from-bad-checksum",
            tampered(**{"from": owner.address.swapcase().replace("0X", "0x")}),
            400,
            "request.from",
        ),
        ("request-unknown-field", tampered(extra="1"), 422, "request.extra"),
        ("top-level-unknown-field", {**good, "relayer": "x"}, 422, "relayer"),
        ("request-missing", {"signature": good["signature"]}, 422, "request"),
    ]


async def test_gasless_bad_input_is_refused_naming_the_field_and_writes_nothing(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    queues: tuple[str, str],
    sqs: Any,
) -> None:
    cases = _gasless_cases(runtime.settings)
    assert len(cases) + len(DIRECT_CASES) >= 40
    for case_id, body, status, names in cases:
        try:
            await _assert_refused(client, runtime, GASLESS, body, {}, api_key, status, names)
        except AssertionError as exc:
            raise AssertionError(f"gasless case {case_id}: {exc}") from exc
    received = await sqs.receive_message(QueueUrl=queues[0], WaitTimeSeconds=0)
    assert received.get("Messages", []) == []


async def test_valid_direct_and_gasless_requests_are_accepted(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """The control case for the tables above: the same shapes, valid, get 202."""
    headers = {"X-API-Key": api_key}
    ok_direct = direct(data="0x", gasLimit="21000", speed="safeLow", validUntil=LATER)
    assert (await client.post(DIRECT, json=ok_direct, headers=headers)).status_code == 202
    lower = direct(to=DEAD.lower())
    assert (await client.post(DIRECT, json=lower, headers=headers)).status_code == 202
    body = signed_gasless(runtime.settings, data="0xa9059cbb")
    assert (await client.post(GASLESS, json=body, headers=headers)).status_code == 202
    # The deadline written as a whole number with ".0" is the same integer (JSON Schema's
    # integer; the signature, over the integer, still verifies).
    written = signed_gasless(runtime.settings, data="0xa9059cbb")
    written["request"]["deadline"] = float(written["request"]["deadline"])
    assert (await client.post(GASLESS, json=written, headers=headers)).status_code == 202
    assert await count_rows(runtime) == 4
