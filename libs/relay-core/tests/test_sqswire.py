"""relay_core.sqswire: the hot SQS calls signed as botocore signs them, answered as botocore
answers them, and everything else left to botocore."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import orjson
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.exceptions import ClientError

from relay_core import localsqs
from relay_core import queue as queue_mod
from relay_core.sqswire import SqsWire


def _client(endpoint: str, **extra: Any) -> Any:
    return queue_mod.sqs_client(
        wire=True,
        endpoint_url=endpoint,
        region_name="eu-west-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        **extra,
    )


@pytest.mark.parametrize("token", [None, "session-token/with+chars="])
@pytest.mark.parametrize(
    "endpoint", ["https://sqs.eu-west-1.amazonaws.com", "http://127.0.0.1:4566"]
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

    request = AWSRequest(
        method="POST",
        url=endpoint + "/",
        data=body,
        headers={k: v for k, v in ours.items() if k not in ("authorization", "x-amz-date", "host")},
    )
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: datetime(*now[:6]))
    SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token), "sqs", "eu-west-1"
    ).add_auth(request)
    assert request.headers["Authorization"] == ours["authorization"]
    assert request.headers["X-Amz-Date"] == ours["x-amz-date"]


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
async def flaky() -> AsyncIterator[tuple[str, list[int]]]:
    """An endpoint that answers 503 twice, then as SQS would."""
    seen: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(1)
        if len(seen) <= 2:
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


def _settings() -> Any:
    from relay_core.settings import InfraSettings

    return InfraSettings(database_url="sqlite:///unused.db")


async def test_an_unreachable_endpoint_raises_a_connection_error() -> None:
    endpoint = f"http://127.0.0.1:{localsqs.free_port()}"
    config = queue_mod.client_config(_settings(), timeout_s=1.0, retries=1)
    async with _client(endpoint, config=config) as sqs:
        with pytest.raises(ConnectionError):  # relay_core.http.NotSent
            await sqs.send_message_batch(QueueUrl=f"{endpoint}/1/q", Entries=[])
