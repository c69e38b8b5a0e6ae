"""`relay queues create` sets up both queues with the redrive on any SQS endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from relay_core import jsonutil
from relay_core import queue as queue_mod
from relay_devstack import localsqs


@pytest.mark.parametrize("server_kind", ["ministack", "moto"])
async def test_queues_create_makes_queue_and_dlq_with_redrive_and_is_rerunnable(
    server_kind: str,
) -> None:
    server = localsqs.start(server_kind)
    name = f"q{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": server.endpoint,
        "RELAY_QUEUE_NAME": name,
        "RELAY_DLQ_NAME": f"{name}-dlq",
        "RELAY_QUEUE_MAX_RECEIVE_COUNT": "5",
    }
    try:
        for _ in range(2):  # running it again changes nothing and does not fail
            result = subprocess.run(
                [sys.executable, "-m", "relay_api.cli", "queues", "create"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            assert "maxReceiveCount 5" in result.stdout
        async with queue_mod.sqs_client(
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        ) as sqs:
            url = (await sqs.get_queue_url(QueueName=name))["QueueUrl"]
            dlq = (await sqs.get_queue_url(QueueName=f"{name}-dlq"))["QueueUrl"]
            attrs: dict[str, Any] = (
                await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
            )["Attributes"]
            dlq_arn = (await sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"]))[
                "Attributes"
            ]["QueueArn"]
        redrive = jsonutil.loads(attrs["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"] == dlq_arn
        assert int(redrive["maxReceiveCount"]) == 5
        assert attrs["VisibilityTimeout"] == "30"
        assert attrs["MessageRetentionPeriod"] == "345600"
    finally:
        server.stop()


def test_local_sqs_server_listens_on_loopback_only() -> None:
    server = localsqs.start()
    try:
        listening = subprocess.run(
            ["ss", "-ltnpH"], capture_output=True, text=True, check=True
        ).stdout
        mine = [line for line in listening.splitlines() if f"pid={server.process.pid}," in line]
        assert mine, listening
        for line in mine:
            local = line.split()[3]
            assert local.startswith("127.0.0.1:"), line
    finally:
        server.stop()
