"""relay_wire.sqswire: the hot SQS calls signed as botocore signs them, answered as botocore
answers them, and everything else left to botocore."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.exceptions import ClientError

from relay_core import queue as queue_mod
from relay_devstack import localsqs
from relay_wire.sqswire import SqsWire

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def _client(endpoint: str, **extra: Any) -> Any:
    return queue_mod.sqs_client(
        wire=True,
        endpoint_url=endpoint,
        region_name="eu-west-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key=SECRET,
        **extra,
    )


@pytest.mark.parametrize("token", [None, "session-token/with+chars="])
@pytest.mark.parametrize(
    "endpoint",
    [
        "https://sqs.eu-west-1.amazonaws.com",
        "http://127.0.0.1:4566",
        "http://[::1]:4566",  # the Host keeps an IPv6 address's brackets
        "https://[2001:db8::1]",
        # a path as the request line has it (percent-encoded): SigV4 encodes it once more
        "https://proxy.example/sqs%20proxy/%E1%88%B4/./x/../",
    ],
)
async def test_the_signature_is_the_one_botocore_computes(
    endpoint: str, token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = orjson.dumps(
        {"QueueUrl": f"{endpoint}/1/q", "Entries": [{"Id": "0", "MessageBody": "é"}]}
    )
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token)
    now = time.gmtime(1_795_000_000)
    async with _client(endpoint) as sqs:
        assert isinstance(sqs, SqsWire)
        ours = sqs.sign("SendMessageBatch", body, credentials, now)

    parts = urlsplit(endpoint)
    request = AWSRequest(
        method="POST",
        url=f"{parts.scheme}://{parts.netloc}{parts.path or '/'}",
        data=body,
        headers={k: v for k, v in ours.items() if k not in ("authorization", "x-amz-date", "host")},
    )
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: datetime(*now[:6]))
    SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token), "sqs", "eu-west-1"
    ).add_auth(request)
    assert request.headers["Authorization"] == ours["authorization"]
    assert request.headers["X-Amz-Date"] == ours["x-amz-date"]
    assert ours["host"] == parts.netloc.removesuffix(":443")


@pytest.fixture
async def verifying() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """An SQS stand-in on the IPv6 loopback, under a path with a space and a non-ASCII
    character, that checks each request as AWS does: the Host is its own, and the signature
    is the one botocore computes over the request as received (its path as sent)."""
    seen: list[tuple[str, str]] = []
    port = localsqs.free_port()

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.headers["host"], request.raw_path))
        authorization = request.headers["authorization"]
        names = authorization.partition("SignedHeaders=")[2].partition(",")[0].split(";")
        received = AWSRequest(
            method=request.method,
            url=f"http://[::1]:{port}{request.raw_path}",
            data=await request.read(),
            headers={name: request.headers[name] for name in names},
        )
        received.context["timestamp"] = request.headers["x-amz-date"]
        signer = SigV4Auth(Credentials("AKIDEXAMPLE", SECRET), "sqs", "eu-west-1")
        expected = signer.signature(
            signer.string_to_sign(received, signer.canonical_request(received)), received
        )
        if request.headers["host"] != f"[::1]:{port}" or not authorization.endswith(expected):
            return web.json_response({"__type": "SignatureDoesNotMatch"}, status=403)
        return web.json_response({"Successful": [], "Failed": []})

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "::1", port).start()
    try:
        yield f"http://[::1]:{port}/sqs proxy/ሴ", seen
    finally:
        await runner.cleanup()


async def test_a_call_to_an_ipv6_endpoint_under_an_encoded_path_is_accepted(
    verifying: tuple[str, list[tuple[str, str]]],
) -> None:
    endpoint, seen = verifying
    async with _client(endpoint) as sqs:
        answer = await sqs.delete_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
    assert answer == {"Successful": [], "Failed": []}
    port = urlsplit(endpoint).port
    assert seen == [(f"[::1]:{port}", "/sqs%20proxy/%E1%88%B4")]


@pytest.fixture(scope="module")
def server() -> Any:
    started = localsqs.start("ministack")
    try:
        yield started
    finally:
        started.stop()


async def test_send_receive_and_delete_answer_as_botocore_answers(server: Any) -> None:
    async with (
        _client(server.endpoint) as sqs,
        queue_mod.sqs_client(
            endpoint_url=server.endpoint,
            region_name="eu-west-1",
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="x",
        ) as plain,
    ):
        url = (await sqs.create_queue(QueueName="wire-q"))["QueueUrl"]  # botocore's
        attributes = {"traceparent": {"DataType": "String", "StringValue": "00-ab-cd-01"}}
        sent = await sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "MessageBody": f"body-{i}", "MessageAttributes": attributes}
                for i in range(3)
            ],
        )
        assert sorted(e["Id"] for e in sent["Successful"]) == ["0", "1", "2"]
        got = await sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            AttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=["All"],
        )
        messages = got["Messages"]
        assert sorted(m["Body"] for m in messages) == ["body-0", "body-1", "body-2"]
        assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "1"
        assert messages[0]["MessageAttributes"] == attributes
        deleted = await sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )
        assert len(deleted["Successful"]) == 3
        # What botocore itself sees afterwards: an empty queue.
        after = await plain.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        assert after["Attributes"]["ApproximateNumberOfMessages"] == "0"
        assert sqs.calls == 3


async def test_an_aws_error_is_botocores_client_error_with_its_code(server: Any) -> None:
    async with _client(server.endpoint) as sqs:
        url = (await sqs.create_queue(QueueName="wire-e"))["QueueUrl"]
        with pytest.raises(ClientError) as raised:
            await sqs.send_message_batch(
                QueueUrl=url + "-gone", Entries=[{"Id": "0", "MessageBody": "x"}]
            )
    error = raised.value.response["Error"]
    assert error["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.fixture
async def flaky(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, list[int]]]:
    """An endpoint that answers 503 twice, then as SQS would; or, given a delay (indirect
    parametrization), 503 always, that many seconds late."""
    seen: list[int] = []
    failing: float | None = getattr(request, "param", None)

    async def handle(request: web.Request) -> web.Response:
        seen.append(1)
        if failing is not None:
            await asyncio.sleep(failing)
        if len(seen) <= 2 or failing is not None:
            return web.Response(status=503, body=b'{"__type":"ServiceUnavailable"}')
        return web.json_response({"Successful": [], "Failed": []})

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = localsqs.free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_server_error_is_tried_again_within_the_configured_attempts(
    flaky: tuple[str, list[int]],
) -> None:
    endpoint, seen = flaky
    config = queue_mod.client_config(_settings(), retries=2)  # retries: 3 attempts
    async with _client(endpoint, config=config) as sqs:
        answer = await sqs.delete_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
    assert answer == {"Successful": [], "Failed": []}
    assert len(seen) == 3
    seen.clear()
    config = queue_mod.client_config(_settings(), retries=1)
    async with _client(endpoint, config=config) as sqs:
        with pytest.raises(ClientError) as raised:
            await sqs.delete_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert len(seen) == 2


@pytest.mark.parametrize("flaky", [0.0], indirect=True)
async def test_a_failing_call_is_tried_a_few_times_whatever_the_config_allows(
    flaky: tuple[str, list[int]],
) -> None:
    endpoint, seen = flaky
    config = queue_mod.client_config(_settings(), retries=10)  # would be 11 attempts
    async with _client(endpoint, config=config) as sqs:
        with pytest.raises(ClientError) as raised:
            await sqs.send_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert len(seen) == 4


@pytest.mark.parametrize("flaky", [2.0], indirect=True)
async def test_no_retry_starts_once_the_retry_window_has_passed(
    flaky: tuple[str, list[int]],
) -> None:
    endpoint, seen = flaky
    config = queue_mod.client_config(_settings(), retries=10)
    started = time.monotonic()
    async with _client(endpoint, config=config) as sqs:
        with pytest.raises(ClientError):
            await sqs.delete_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
    elapsed = time.monotonic() - started
    # Answers 2 s late: tried at 0, ~2 and ~4 s; at ~6 s the 5 s window has passed.
    assert len(seen) == 3
    assert elapsed < 7.5, f"a call failing slowly gave up after {elapsed:.1f} s"


def _settings() -> Any:
    from relay_core.settings import InfraSettings

    return InfraSettings(database_url="sqlite:///unused.db")


async def test_an_unreachable_endpoint_raises_a_connection_error() -> None:
    endpoint = f"http://127.0.0.1:{localsqs.free_port()}"
    config = queue_mod.client_config(_settings(), timeout_s=1.0, retries=1)
    async with _client(endpoint, config=config) as sqs:
        with pytest.raises(ConnectionError):  # relay_wire.http.NotSent
            await sqs.send_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
